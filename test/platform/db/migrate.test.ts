import { expect } from 'vitest';
import { migrate } from '../../../src/platform/db/migrate.js';
import { databaseTest } from '../../support/fixtures.js';

// An empty database: the test runs the migrations itself.
const test = databaseTest({ migrated: false });

test('applies every migration once, records it, and applies nothing on the next run', async ({ database: target }) => {
  const first = await migrate(target.db);
  expect(first.length).toBeGreaterThan(0);
  expect(await migrate(target.db)).toEqual([]);
  const recorded = await target.db.query<{ version: number }>('SELECT version FROM schema_migrations WHERE version > 0');
  expect(recorded).toHaveLength(first.length);
});
