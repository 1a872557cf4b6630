import { readdirSync } from 'node:fs';
import { expect } from 'vitest';
import { migrate } from '../../../src/platform/db/migrate.js';
import { POSTGRES_URL } from '../../support/databases.js';
import { databaseTest } from '../../support/fixtures.js';
import { ROOT } from '../../../harness/processes.js';

// A new database: empty on PostgreSQL; on PGlite, the kept template, which the migrations made.
const test = databaseTest({ migrated: false });

test('applies every migration once, records it, and applies nothing on the next run', async ({ database: target }) => {
  const files = readdirSync(`${ROOT}/migrations`).filter((file) => /^\d+\.do\..+\.sql$/.test(file));
  expect(await migrate(target.db)).toHaveLength(POSTGRES_URL ? files.length : 0);
  expect(await migrate(target.db)).toEqual([]);
  const recorded = await target.db.query<{ version: number }>('SELECT version FROM schema_migrations WHERE version > 0');
  expect(recorded).toHaveLength(files.length);
});
