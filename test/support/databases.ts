import type { Database } from '../../src/platform/db/database.js';
import { openDatabase } from '../../src/platform/db/open.js';
import { createScratchDatabase } from '../../harness/databases.js';
import { eventually } from './eventually.js';

/** The PostgreSQL server the suite runs against, or undefined for PGlite. */
export const POSTGRES_URL = process.env.DATABASE_URL || undefined;

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
