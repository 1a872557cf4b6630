import { randomUUID } from 'node:crypto';
import pg from 'pg';
import type { Database } from '../../src/platform/db/database.js';
import { openDatabase } from '../../src/platform/db/open.js';
import { eventually } from './eventually.js';

/** The PostgreSQL server the suite runs against, or undefined for PGlite. */
export const POSTGRES_URL = process.env.DATABASE_URL || undefined;

async function adminQuery(serverUrl: string, sql: string) {
  const client = new pg.Client({ connectionString: serverUrl });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

/**
 * An empty database of its own on the PostgreSQL server of `serverUrl` (a random name unless
 * given; a given name is dropped first, so a run starts from nothing), and how to drop it again.
 */
export async function createScratchDatabase(serverUrl: string, name = `pets_test_${randomUUID().replaceAll('-', '').slice(0, 16)}`) {
  const drop = () => adminQuery(serverUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  await drop();
  await adminQuery(serverUrl, `CREATE DATABASE ${name}`);
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return { url: url.href, drop };
}

/** Opens an existing database the way the service does: on a PostgreSQL server, or in an embedded data directory. */
export const openExistingDatabase = ({ url, dataDir = 'memory://' }: { url?: string; dataDir?: string }) =>
  openDatabase({ DATABASE_URL: url, DATA_DIR: dataDir, DB_POOL_SIZE: 1 });

/**
 * A database of its own for one test file, opened the way the service opens one (openDatabase):
 * a fresh database on the PostgreSQL server in DATABASE_URL, or an in-memory PGlite. `url` is
 * the PostgreSQL URL, for servers started as processes; `drop()` closes and removes it.
 */
export async function createTestDatabase(): Promise<{ db: Database; url?: string; drop: () => Promise<void> }> {
  const scratch = POSTGRES_URL ? await createScratchDatabase(POSTGRES_URL) : undefined;
  const db = await openDatabase({ DATABASE_URL: scratch?.url, DATA_DIR: 'memory://', DB_POOL_SIZE: 10 });
  return {
    db,
    url: scratch?.url,
    drop: async () => {
      await db.close().catch(() => {});
      await scratch?.drop();
    },
  };
}

/** Resolves once a statement on the PostgreSQL database of `db` sleeps in pg_sleep: a slowed insert is in flight. */
export const insertInFlight = (db: Database) =>
  eventually(async () => {
    const [sleeping] = await db.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND datname = current_database()",
    );
    return sleeping!.n > 0;
  });
