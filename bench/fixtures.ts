import type { Database } from '../src/platform/db/database.js';
import { migrate } from '../src/platform/db/migrate.js';
import { encodeCursor } from '../src/platform/pagination.js';
import { createApiKeysRepository } from '../src/api-keys/repository.js';
import { normalizeLimits } from '../src/plans/limits.js';
import { createScratchDatabase, openExistingDatabase } from '../harness/databases.js';

export const PET_COUNT = 10_000;
/** How many pets serve as the walk's cursors: spread evenly over the whole table, in id order. */
export const WALK_CURSOR_COUNT = 3_000;

/** The largest limit the api_keys columns hold (int4): no run can exhaust it, so every request is allowed. */
const UNREACHABLE_LIMIT = 2_147_483_647;

/** Fixed windows of these lengths, named as the plans name theirs, none of which a run can spend. */
const unreachable = (lengths: number[]) =>
  normalizeLimits(
    lengths.map((windowSeconds) => ({
      name: ({ 1: 'second', 60: 'minute', 86_400: 'day' } as Record<number, string>)[windowSeconds]!,
      limit: UNREACHABLE_LIMIT,
      windowSeconds,
    })),
  );

/** What the scenarios need from a seeded database. */
export interface Fixture {
  /** An enterprise key, so every request takes the full auth and rate-limit path and is allowed. */
  apiKey: string;
  /** The same with windows of its own, three (a second, a minute, a day) where the plans have two: what a third window costs. */
  threeWindowsKey: string;
  /** The cursor of a page 90% of the way through the available pets: a deep keyset page. */
  deepCursor: string;
  /** An existing pet, for the deprecated by-id operation. */
  petId: number;
  /**
   * The ids of WALK_CURSOR_COUNT pets spread evenly over the table (every 10/3rd pet in id order,
   * from the first to one of the last few): the walk continues after one of them.
   */
  walkAfterIds: number[];
}

/**
 * The project's migrations, then PET_COUNT pets in one statement: half available, a fifth
 * pending, a fifth sold and a tenth without a status, interleaved so every status spans all ids.
 */
async function seed(db: Database): Promise<Fixture> {
  await migrate(db);
  await db.query(
    `INSERT INTO pets (name, category_id, status)
     SELECT 'pet ' || i, 1 + i % 12,
            CASE WHEN i % 10 < 5 THEN 'available' WHEN i % 10 < 7 THEN 'pending' WHEN i % 10 < 9 THEN 'sold' END
     FROM generate_series(1, $1::int) AS i`,
    [PET_COUNT],
  );
  const keys = createApiKeysRepository(db);
  const { key } = await keys.create({ plan: 'enterprise', name: 'benchmark', limits: unreachable([60, 86_400]) });
  const threeWindows = await keys.create({ plan: 'enterprise', name: 'benchmark, three windows', limits: unreachable([1, 60, 86_400]) });
  const [deep] = await db.query<{ id: number }>(
    `SELECT id FROM pets WHERE status = 'available' ORDER BY id
     OFFSET (SELECT count(*) * 9 / 10 FROM pets WHERE status = 'available') LIMIT 1`,
  );
  const [middle] = await db.query<{ id: number }>('SELECT id FROM pets ORDER BY id OFFSET $1 LIMIT 1', [PET_COUNT / 2]);
  const ids = (await db.query<{ id: number }>('SELECT id FROM pets ORDER BY id')).map((row) => Number(row.id));
  const walkAfterIds = Array.from({ length: WALK_CURSOR_COUNT }, (_, index) => ids[Math.floor((index * ids.length) / WALK_CURSOR_COUNT)]!);
  return {
    apiKey: key,
    threeWindowsKey: threeWindows.key,
    deepCursor: encodeCursor(Number(deep!.id), 'available'),
    petId: Number(middle!.id),
    walkAfterIds,
  };
}

export interface BenchDatabase {
  url: string;
  fixture: Fixture;
  drop(): Promise<void>;
}

/** A dedicated database on the PostgreSQL server, dropped first so every run starts from the same data. */
export async function createSeededPostgres(serverUrl: string, name: string): Promise<BenchDatabase> {
  const scratch = await createScratchDatabase(serverUrl, name);
  const db = await openExistingDatabase({ url: scratch.url });
  try {
    const fixture = await seed(db);
    // Fresh statistics, so the first measured queries get the same plans as the last.
    await db.query('VACUUM ANALYZE pets');
    return { url: scratch.url, fixture, drop: scratch.drop };
  } finally {
    await db.close();
  }
}

/** The embedded default in DATA_DIR, seeded the same way; closed again so the server can take its lock. */
export async function seedPglite(dataDir: string): Promise<Fixture> {
  const db = await openExistingDatabase({ dataDir });
  try {
    return await seed(db);
  } finally {
    await db.close();
  }
}
