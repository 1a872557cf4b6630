import { afterAll, beforeAll, expect, it } from 'vitest';
import { migrate } from '../src/db/migrate.js';
import { createTestDatabase } from './support/databases.js';

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
