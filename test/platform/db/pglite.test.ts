import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'vitest';
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
