import {
  copyFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  openAsBlob,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PGlite, type Transaction as PgliteTransaction } from '@electric-sql/pglite';
import type { Database, Queryable, Statement } from './database.js';
import { DataDirInUseError } from './errors.js';
import { migrate, migrationsDigest } from './migrate.js';
import { MINUTE_MS } from '../time.js';

const ANALYZE_EVERY_MS = MINUTE_MS;

export interface EmbeddedOptions {
  /**
   * A command that reads or writes a few rows and exits (the keys command, migrate): no planner
   * statistics upkeep, and shared buffers of 8 MB rather than PostgreSQL's 128 MB, which were
   * most of such a process's memory.
   */
  brief?: boolean;
}
const SMALL_BUFFERS_START_PARAMS = [...PGlite.defaultStartParams, '-c', 'shared_buffers=8MB'];

/**
 * PostgreSQL compiled to WASM, in this process: the zero-install default. It holds one
 * connection and admits one process per data directory, so it is never shared over a socket,
 * and a lock file keeps a second process (a server, or the keys command) out.
 */
export async function createPgliteDatabase(dataDir: string, { brief = false }: EmbeddedOptions = {}): Promise<Database> {
  const unlock = dataDir.startsWith('memory://') ? () => {} : lockDataDir(dataDir);
  let db: PGlite;
  let fromTemplate: boolean;
  try {
    // A database in memory holds its files in memory already: large buffers would copy them twice,
    // and zeroing PostgreSQL's 128 MB was most of the CPU of opening one (a test app's, above all).
    ({ db, fromTemplate } = await openPglite(dataDir, brief || dataDir.startsWith('memory://') ? SMALL_BUFFERS_START_PARAMS : undefined));
  } catch (error) {
    unlock();
    throw error;
  }
  // PGlite has no autovacuum, so nothing would ever gather planner statistics: without them a
  // status-filtered page sorts every matching row.
  const analyze = () =>
    db.query('ANALYZE').then(
      () => {},
      () => {},
    );
  // A database just made from the template has its statistics from there: its tables are as empty.
  if (!brief && !fromTemplate) await analyze();
  const maintenance = brief ? undefined : setInterval(() => void analyze(), ANALYZE_EVERY_MS).unref();
  const database = databaseOn(db);
  return {
    ...database,
    close: async () => {
      clearInterval(maintenance);
      if (db.closed) return;
      await database.close();
      unlock();
    },
  };
}

/** The service's Database over an open PGlite. */
function databaseOn(db: PGlite): Database {
  return {
    kind: 'pglite',
    query: queryOn(db),
    transaction: async (work) => {
      const committed: Array<() => void> = [];
      const result = await db.transaction((tx) =>
        work({
          query: queryOn(tx),
          runScript: async (sql) => void (await tx.exec(sql)),
          afterCommit: (callback) => committed.push(callback),
        }),
      );
      for (const callback of committed) callback();
      return result;
    },
    // One process, one connection: the listener is never lost. Closing the database ends it too.
    listen: async (channel, onNotify) => {
      const unlisten = await Promise.all(
        (typeof channel === 'string' ? [channel] : channel).map((name) => db.listen(name, (payload) => onNotify(payload, name))),
      );
      return async () => {
        if (!db.closed) for (const each of unlisten) await each();
      };
    },
    close: async () => {
      if (!db.closed) await db.close();
    },
  };
}

const queryOn =
  (target: PGlite | PgliteTransaction): Queryable['query'] =>
  async <Row>(statement: Statement | string, params: readonly unknown[] = []) => {
    const { text, rowMode } = typeof statement === 'string' ? { text: statement, rowMode: undefined } : statement;
    return (await target.query<Row>(text, params as unknown[], rowMode && { rowMode })).rows;
  };

/**
 * initdb and the migrations are most of the cost of a new database (about 7 s of CPU against
 * under 1 s to unpack their result), so that result is kept, once per PGlite version and set of
 * migrations, and every later new database starts from it: a first start, the keys command on a
 * new directory, each test app (migrate() then finds nothing to do). It is kept twice: as a tar,
 * which a database in memory loads, and as a data directory, which a new directory on disk is
 * copied from (unpacking the tar there would hold all of it in memory, twice what opening a
 * database takes). Its name says how it was made too (see makeTemplate), so that a change there
 * makes a new one. Best effort: where the cache cannot be written, each new database runs initdb.
 */
export const PGLITE_TEMPLATE_DIR = fileURLToPath(
  new URL(`../../../node_modules/.cache/pet-store/pglite-${pgliteVersion()}-${migrationsDigest()}-small-wal-analyzed`, import.meta.url),
);
export const PGLITE_TEMPLATE = `${PGLITE_TEMPLATE_DIR}.tar`;

function pgliteVersion(): string {
  const entry = createRequire(import.meta.url).resolve('@electric-sql/pglite');
  return (JSON.parse(readFileSync(join(dirname(entry), '..', 'package.json'), 'utf8')) as { version: string }).version;
}

/** Opens the database in dataDir, a new one made from the template (fromTemplate) when there is none. */
async function openPglite(dataDir: string, startParams?: string[]): Promise<{ db: PGlite; fromTemplate: boolean }> {
  const inMemory = dataDir.startsWith('memory://');
  const isNew = inMemory || !existsSync(join(dataDir, 'PG_VERSION'));
  // A new directory on disk is a copy of the kept one; in memory, or where none is kept, the tar is loaded.
  const loadDataDir = isNew && (inMemory || !(await copyTemplateDir(dataDir))) ? await templateTar() : undefined;
  return { db: await PGlite.create(dataDir, { startParams, loadDataDir }), fromTemplate: isNew };
}

/**
 * Makes the kept templates unless they are there already (at install, so that a first start is
 * quick): whether it made them, found them, or could not keep them (a read-only install).
 */
export async function preparePgliteTemplate(): Promise<'made' | 'found' | 'not kept'> {
  if (existsSync(PGLITE_TEMPLATE) && existsSync(join(PGLITE_TEMPLATE_DIR, 'PG_VERSION'))) return 'found';
  return (await keepTemplateDir()) ? 'made' : 'not kept';
}

/** The kept tar: a Blob backed by its file, not a copy of its 30 MB in memory; made (and kept) if there is none. */
async function templateTar(): Promise<Blob> {
  try {
    // Throws at once, not through the promise, when there is no such file.
    return await openAsBlob(PGLITE_TEMPLATE);
  } catch {
    return makeTemplate();
  }
}

/**
 * Copies the kept data directory into a new one, its PG_VERSION last, since that file is what
 * marks a directory as a database; false when there is none and none could be kept.
 */
async function copyTemplateDir(dataDir: string): Promise<boolean> {
  const version = join(PGLITE_TEMPLATE_DIR, 'PG_VERSION');
  // Unpacked from the tar at most: without one, the database being made keeps it, and the next copies.
  if (!existsSync(version) && !(existsSync(PGLITE_TEMPLATE) && (await keepTemplateDir()))) return false;
  cpSync(PGLITE_TEMPLATE_DIR, dataDir, { recursive: true, filter: (source) => source !== version });
  copyFileSync(version, join(dataDir, 'PG_VERSION'));
  return true;
}

/** Unpacks the tar into the kept data directory, aside and renamed (another process may be at it too); true when it is there. */
async function keepTemplateDir(): Promise<boolean> {
  const partial = `${PGLITE_TEMPLATE_DIR}.${process.pid}`;
  try {
    const db = await PGlite.create(partial, { loadDataDir: await templateTar() });
    await db.close();
    renameSync(partial, PGLITE_TEMPLATE_DIR);
  } catch {
    // Not kept (a read-only install, or another process was first).
  } finally {
    rmSync(partial, { recursive: true, force: true });
  }
  return existsSync(join(PGLITE_TEMPLATE_DIR, 'PG_VERSION'));
}

async function makeTemplate(): Promise<Blob> {
  // WAL segments of 1 MB, not initdb's 16: every new database copies the template's files whole,
  // and an empty 16 MB segment was 40% of them.
  const fresh = await PGlite.create('memory://', { initDbStartParams: ['--wal-segsize=1'] });
  try {
    await migrate(databaseOn(fresh));
    // The statistics of its empty tables, which a database made from it would otherwise gather at
    // its first open; a checkpoint, after which the WAL of the migrations is not kept.
    await fresh.exec('ANALYZE; CHECKPOINT');
    const template = await fresh.dumpDataDir('none');
    await keepTemplate(Buffer.from(await template.arrayBuffer()));
    return template;
  } finally {
    await fresh.close();
  }
}

async function keepTemplate(template: Buffer) {
  try {
    mkdirSync(dirname(PGLITE_TEMPLATE), { recursive: true });
    // Written aside and renamed: processes creating databases at once never read half a file.
    const partial = `${PGLITE_TEMPLATE}.${process.pid}`;
    writeFileSync(partial, template);
    renameSync(partial, PGLITE_TEMPLATE);
    removeOtherTemplates();
  } catch {
    // Not kept (a read-only install): the next new database runs initdb again.
  }
}

/** Each template is 60 MB (tar and directory), and each edit of a migration makes another: only the current one is kept. */
function removeOtherTemplates() {
  const cache = dirname(PGLITE_TEMPLATE);
  const current = basename(PGLITE_TEMPLATE_DIR);
  for (const entry of readdirSync(cache)) {
    if (entry.startsWith('pglite-') && !entry.startsWith(current)) rmSync(join(cache, entry), { recursive: true, force: true });
  }
}

/** Takes the data directory for this process; a lock left by a process that is gone is taken over. */
function lockDataDir(dataDir: string): () => void {
  mkdirSync(dataDir, { recursive: true });
  const lockFile = join(dataDir, 'pet-store.lock');
  for (;;) {
    try {
      writeFileSync(lockFile, String(process.pid), { flag: 'wx' });
      return () => rmSync(lockFile, { force: true });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    const holder = Number(readFileSync(lockFile, 'utf8'));
    if (isAlive(holder)) {
      throw new DataDirInUseError(dataDir, holder);
    }
    rmSync(lockFile, { force: true });
  }
}

function isAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}
