import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { chown, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { freePort } from '../../harness/free-port.js';
import { sleep } from './time.js';

/**
 * A private PostgreSQL server for fault-injection tests: its own data directory and port, so a
 * test may stop, kill, freeze and restart it without touching the PostgreSQL other tests share.
 * Needs only the server binaries (initdb, postgres), not a running PostgreSQL.
 */

/** Where initdb and postgres are: POSTGRES_BIN_DIR, else the newest /usr/lib/postgresql/N/bin. */
function findBinDir(): string | undefined {
  const candidates = [process.env.POSTGRES_BIN_DIR];
  if (existsSync('/usr/lib/postgresql')) {
    const versions = readdirSync('/usr/lib/postgresql').sort((a, b) => Number(b) - Number(a));
    candidates.push(...versions.map((version) => `/usr/lib/postgresql/${version}/bin`));
  }
  return candidates.find((dir): dir is string => Boolean(dir) && existsSync(join(dir!, 'initdb')) && existsSync(join(dir!, 'postgres')));
}

/** initdb refuses root: as root, the server runs as the postgres user. */
function serverUser(): { uid: number; gid: number } | undefined | null {
  if (process.getuid?.() !== 0) return undefined;
  try {
    const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
    return { uid, gid };
  } catch {
    return null; // root without a postgres user: cannot run a server
  }
}

const BIN_DIR = findBinDir();

/** How a private server runs: a test database on loopback, not a durable one. */
export const TEST_SERVER_SETTINGS = [
  'listen_addresses=127.0.0.1',
  'fsync=off',
  'synchronous_commit=off',
  'full_page_writes=off',
  'shared_buffers=16MB',
  'max_connections=60',
];
const USER = serverUser();

/** True when this machine can run a private PostgreSQL server (binaries, and a non-root user). */
export const PRIVATE_POSTGRES_AVAILABLE = BIN_DIR !== undefined && USER !== null;

async function exec(command: string, args: string[], cwd: string): Promise<void> {
  const child = spawn(join(BIN_DIR!, command), args, { cwd, stdio: ['ignore', 'pipe', 'pipe'], ...(USER ?? {}) });
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk));
  child.stderr.on('data', (chunk) => (output += chunk));
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  if (code !== 0) throw new Error(`${command} exited with ${code}:\n${output}`);
}

export interface PostgresServer {
  port: number;
  /** A URL of this server, for the given database (postgres by default). */
  url(database?: string): string;
  /** Starts it again, on the same port and data directory, and waits until it accepts queries. */
  start(): Promise<void>;
  /**
   * Stops it: 'fast' (SIGINT: ends every session, the way a restart does), 'immediate' (SIGQUIT:
   * no clean shutdown) or 'kill' (SIGKILL of the whole process tree, a crash).
   */
  stop(mode?: 'fast' | 'immediate' | 'kill'): Promise<void>;
  /** SIGSTOP to every process of the server: connections stay open and nothing answers. */
  freeze(): void;
  /** SIGCONT to every process frozen by freeze(). */
  thaw(): void;
  /** A fresh empty database; drop() removes it. */
  createDatabase(): Promise<{ name: string; url: string; drop: () => Promise<void> }>;
  /** What the server printed (its log), for failure messages. */
  output(): string;
  /** Stops it and removes its directory. */
  destroy(): Promise<void>;
}

export async function startPostgresServer(): Promise<PostgresServer> {
  if (!PRIVATE_POSTGRES_AVAILABLE) throw new Error('no PostgreSQL binaries (set POSTGRES_BIN_DIR) or no postgres user');
  const dir = await mkdtemp(join(tmpdir(), 'pets-pg-'));
  if (USER) await chown(dir, USER.uid, USER.gid);
  const dataDir = join(dir, 'data');
  await exec('initdb', ['-D', dataDir, '-U', 'postgres', '-A', 'trust', '-E', 'UTF8', '--locale=C', '--no-sync', '--no-instructions'], dir);
  const port = await freePort();
  let child: ChildProcess | undefined;
  let exited: Promise<unknown> = Promise.resolve();
  let frozen: number[] = [];
  let output = '';

  const url = (database = 'postgres') => `postgres://postgres@127.0.0.1:${port}/${database}`;

  /** The server and its children (backends, checkpointer, ...): processes this helper started. */
  const processTree = (): number[] => {
    if (!child?.pid) return [];
    let children: number[] = [];
    try {
      children = execFileSync('ps', ['-o', 'pid=', '--ppid', String(child.pid)], { encoding: 'utf8' })
        .split('\n')
        .map((line) => Number(line.trim()))
        .filter((pid) => pid > 0);
    } catch {
      // ps exits 1 when there are no children
    }
    return [child.pid, ...children];
  };

  const killOnExit = () => {
    for (const pid of frozen) process.kill(pid, 'SIGCONT');
    child?.kill('SIGQUIT');
  };
  process.once('exit', killOnExit);

  async function start() {
    if (child) throw new Error('already running');
    const settings = [...TEST_SERVER_SETTINGS];
    const args = ['-D', dataDir, '-p', String(port), '-k', dir, ...settings.flatMap((setting) => ['-c', setting])];
    const started = spawn(join(BIN_DIR!, 'postgres'), args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'], ...(USER ?? {}) });
    child = started;
    started.stdout.on('data', (chunk) => (output += chunk));
    started.stderr.on('data', (chunk) => (output += chunk));
    exited = new Promise((resolve) => started.once('exit', resolve));
    let gone = false;
    void exited.then(() => {
      gone = true;
      if (child === started) child = undefined;
    });
    const deadline = Date.now() + 30_000;
    for (;;) {
      if (gone) throw new Error(`postgres exited at start:\n${output}`);
      const client = new pg.Client({ connectionString: url(), connectionTimeoutMillis: 1_000 });
      client.on('error', () => {});
      try {
        await client.connect();
        await client.query('SELECT 1');
        return;
      } catch (error) {
        if (Date.now() > deadline) throw new Error(`postgres did not accept connections within 30 s\n${output}`, { cause: error });
        await sleep(100);
      } finally {
        await client.end().catch(() => {});
      }
    }
  }

  async function stop(mode: 'fast' | 'immediate' | 'kill' = 'fast') {
    if (!child) return;
    if (frozen.length > 0) thaw();
    if (mode === 'kill') {
      // The whole tree, as a crash would leave it: no backend may outlive the postmaster here.
      for (const pid of processTree()) process.kill(pid, 'SIGKILL');
    } else {
      child.kill(mode === 'fast' ? 'SIGINT' : 'SIGQUIT');
    }
    await exited;
  }

  function freeze() {
    if (!child?.pid) throw new Error('not running');
    // The postmaster first, so that no new backend appears; backends are sessions of their own
    // (PostgreSQL calls setsid), so each gets its signal.
    process.kill(child.pid, 'SIGSTOP');
    frozen = processTree();
    for (const pid of frozen) if (pid !== child.pid) process.kill(pid, 'SIGSTOP');
  }

  function thaw() {
    for (const pid of frozen) process.kill(pid, 'SIGCONT');
    frozen = [];
  }

  async function admin(sql: string) {
    const client = new pg.Client({ connectionString: url() });
    await client.connect();
    try {
      await client.query(sql);
    } finally {
      await client.end();
    }
  }

  await start();
  return {
    port,
    url,
    start,
    stop,
    freeze,
    thaw,
    async createDatabase() {
      const name = `pets_faults_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
      await admin(`CREATE DATABASE ${name}`);
      return { name, url: url(name), drop: () => admin(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`) };
    },
    output: () => output,
    async destroy() {
      await stop('fast');
      process.removeListener('exit', killOnExit);
      await rm(dir, { recursive: true, force: true });
    },
  };
}
