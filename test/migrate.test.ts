import { afterAll, beforeAll, expect, it } from 'vitest';
import { createPostgresDatabase } from '../src/db/postgres.js';
import { migrate } from '../src/db/migrate.js';
import { createTestDatabase, POSTGRES_URL } from './helpers.js';

let target: Awaited<ReturnType<typeof createTestDatabase>>;
beforeAll(async () => {
  target = await createTestDatabase();
});
afterAll(() => target.drop());

it('applies every migration once, records it, and applies nothing on the next run', async () => {
  const first = await migrate(target.db);
  expect(first.length).toBeGreaterThan(0);
  expect(await migrate(target.db)).toEqual([]);
  const recorded = await target.db.query<{ version: number }>('SELECT version FROM schema_migrations WHERE version > 0');
  expect(recorded).toHaveLength(first.length);
});

it.runIf(POSTGRES_URL)('instances starting at the same moment on an empty database migrate it once', async () => {
  const fresh = await createTestDatabase();
  const instances = Array.from({ length: 4 }, () => createPostgresDatabase({ connectionString: fresh.url! }));
  try {
    const results = await Promise.all(instances.map((db) => migrate(db)));
    expect(results.filter((applied) => applied.length > 0)).toHaveLength(1);
    const recorded = await fresh.db.query<{ n: number }>('SELECT count(*)::int AS n FROM schema_migrations WHERE version > 0');
    expect(recorded[0]!.n).toBe(results.flat().length);
  } finally {
    await Promise.all(instances.map((db) => db.close()));
    await fresh.drop();
  }
});
