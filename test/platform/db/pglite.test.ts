import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'vitest';
import type { Database } from '../../../src/platform/db/database.js';
import { migrate } from '../../../src/platform/db/migrate.js';
import { createPgliteDatabase, PGLITE_TEMPLATE, PGLITE_TEMPLATE_DIR } from '../../../src/platform/db/pglite.js';
import { tempDirTest } from '../../support/fixtures.js';

const test = tempDirTest('pets-pglite-');

test('a new data directory starts from the kept result of initdb and the migrations, and is a database of its own', async ({ dir }) => {
  const [first, second] = [join(dir, 'first'), join(dir, 'second')];
  const a = await createPgliteDatabase(first);
  expect(existsSync(PGLITE_TEMPLATE)).toBe(true);
  expect(existsSync(join(PGLITE_TEMPLATE_DIR, 'PG_VERSION'))).toBe(true);
  const b = await createPgliteDatabase(second);
  try {
    expect(await Promise.all([migrate(a), migrate(b)])).toEqual([[], []]);
    // The template's WAL segments are small: its files are copied into each new database whole.
    expect(await a.query('SHOW wal_segment_size')).toEqual([{ wal_segment_size: '1MB' }]);
    await a.query("INSERT INTO pets (name, category_id) VALUES ('Only in first', 1)");
    expect(await b.query('SELECT name FROM pets')).toEqual([]);
    expect(await a.query('SELECT name FROM pets')).toEqual([{ name: 'Only in first' }]);
  } finally {
    await Promise.all([a.close(), b.close()]);
  }
  // Reopened, a directory is itself, not the template again.
  const reopened = await createPgliteDatabase(first);
  try {
    expect(await reopened.query('SELECT name FROM pets')).toEqual([{ name: 'Only in first' }]);
  } finally {
    await reopened.close();
  }
});

test('planner statistics: a new database has those of its empty tables from the template; one reopened gathers its own at once', async ({
  dir,
}) => {
  const reltuples = async (db: Database) =>
    (await db.query<{ reltuples: number }>("SELECT reltuples::int AS reltuples FROM pg_class WHERE relname = 'pets'"))[0]!.reltuples;
  const inMemory = await createPgliteDatabase('memory://');
  const onDisk = await createPgliteDatabase(dir);
  try {
    // -1 would be a table never analyzed, whose size the planner guesses.
    expect([await reltuples(inMemory), await reltuples(onDisk)]).toEqual([0, 0]);
    await onDisk.query("INSERT INTO pets (name, category_id) SELECT 'Pet ' || n, 1 FROM generate_series(1, 500) AS n");
  } finally {
    await Promise.all([inMemory.close(), onDisk.close()]);
  }
  const reopened = await createPgliteDatabase(dir);
  try {
    expect(await reltuples(reopened)).toBe(500);
  } finally {
    await reopened.close();
  }
});
