import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { openDatabase } from '../src/platform/db/open.js';

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
