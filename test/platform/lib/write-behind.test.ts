import { expect } from 'vitest';
import type { Database } from '../../../src/platform/db/database.js';
import { WriteBehind } from '../../../src/platform/lib/write-behind.js';
import { eventually } from '../../support/eventually.js';
import { databaseTest } from '../../support/fixtures.js';
import { sleep } from '../../support/time.js';

const test = databaseTest({ migrated: false });

interface Counted {
  name: string;
  units: number;
}

let tables = 0;

/**
 * A batcher whose writes add its counts to a table of their own in one statement, as the ledger
 * and the usage record do; `hold` makes the next writes wait before their statement (a slow database).
 */
async function counter(db: Database, everyMs = 60_000) {
  const table = `write_behind_${++tables}`;
  await db.query(`CREATE TABLE ${table} (name text PRIMARY KEY, units integer NOT NULL)`);
  const writes: Counted[][] = [];
  const failures: unknown[] = [];
  let inFlight = 0;
  let mostInFlight = 0;
  let held: Promise<void> | undefined;
  const batcher = new WriteBehind<Counted>({
    everyMs,
    write: async (batch) => {
      writes.push(batch.map((entry) => ({ ...entry })));
      mostInFlight = Math.max(mostInFlight, ++inFlight);
      try {
        await held;
        await db.query(
          `INSERT INTO ${table} AS counted (name, units) SELECT * FROM unnest($1::text[], $2::integer[])
           ON CONFLICT (name) DO UPDATE SET units = counted.units + excluded.units`,
          [batch.map(({ name }) => name), batch.map(({ units }) => units)],
        );
      } finally {
        inFlight--;
      }
    },
    merge: (into, from) => (into.units += from.units),
    failed: (error) => failures.push(error),
    worthWriting: ({ units }) => units !== 0,
  });
  return {
    table,
    batcher,
    writes,
    failures,
    mostInFlight: () => mostInFlight,
    add: (name: string, units: number) => (batcher.entry(name, () => ({ name, units: 0 })).units += units),
    /** Makes the writes from now on wait before their statement, until the returned function is called. */
    hold: () => {
      let release!: () => void;
      held = new Promise((resolve) => (release = resolve));
      return () => {
        held = undefined;
        release();
      };
    },
    recorded: async () =>
      Object.fromEntries(
        (await db.query<Counted>(`SELECT name, units FROM ${table} ORDER BY name`)).map(({ name, units }) => [name, units]),
      ),
  };
}

test('a failed write keeps its units: they reach the next write, added to those counted since', async ({ database: { db } }) => {
  const { table, batcher, writes, failures, add, recorded } = await counter(db);
  add('a', 2);
  add('b', 3);
  await db.query(`ALTER TABLE ${table} RENAME TO ${table}_away`);
  const failing = batcher.flush();
  add('a', 5); // counted while the failing write is under way
  await failing;
  expect(failures).toHaveLength(1);
  await db.query(`ALTER TABLE ${table}_away RENAME TO ${table}`);
  expect(await recorded()).toEqual({});

  add('c', 1);
  await batcher.flush();
  expect(await recorded()).toEqual({ a: 7, b: 3, c: 1 });
  // One entry per name in the next batch: the kept units added to the later ones, not beside them.
  expect(writes.at(-1)!.toSorted((x, y) => x.name.localeCompare(y.name))).toEqual([
    { name: 'a', units: 7 },
    { name: 'b', units: 3 },
    { name: 'c', units: 1 },
  ]);
  expect(failures).toHaveLength(1);
});

test('the timer writes once started; close writes what is left once and stops it', async ({ database: { db } }) => {
  const { batcher, writes, add, recorded } = await counter(db, 20);
  batcher.start();
  add('a', 1);
  await eventually(async () => (await recorded()).a === 1);

  add('a', 2);
  add('b', 4);
  await batcher.close();
  expect(await recorded()).toEqual({ a: 3, b: 4 });
  expect(writes).toHaveLength(2);
  await batcher.close();
  add('b', 1); // counted after close: no timer writes it
  await sleep(100);
  expect(writes).toHaveLength(2);
  expect(await recorded()).toEqual({ a: 3, b: 4 });
});

test('one write at a time: a slow write holds off the next, which then takes what came meanwhile', async ({ database: { db } }) => {
  const { batcher, writes, add, hold, recorded, mostInFlight } = await counter(db);
  const release = hold();
  add('a', 1);
  const first = batcher.flush();
  add('a', 2);
  const second = batcher.flush();
  add('b', 4);
  await sleep(50);
  expect(writes).toEqual([[{ name: 'a', units: 1 }]]);

  release();
  await Promise.all([first, second]);
  expect(writes).toEqual([
    [{ name: 'a', units: 1 }],
    [
      { name: 'a', units: 2 },
      { name: 'b', units: 4 },
    ],
  ]);
  expect(mostInFlight()).toBe(1);
  expect(await recorded()).toEqual({ a: 3, b: 4 });
});

test('work between writes waits for the write under way: each unit is then in the table or unwritten, never both', async ({
  database: { db },
}) => {
  const { batcher, add, hold, recorded } = await counter(db);
  const release = hold();
  add('a', 1);
  const writing = batcher.flush();
  add('a', 2);
  const read = batcher.betweenWrites(async () => ({ table: await recorded(), unwritten: batcher.unwritten('a')?.units }));
  await sleep(50);
  release();
  await writing;
  expect(await read).toEqual({ table: { a: 1 }, unwritten: 2 });
});

test('entries with nothing to write are not written', async ({ database: { db } }) => {
  const { batcher, writes, add, recorded } = await counter(db);
  add('a', 3);
  add('a', -3);
  await batcher.flush();
  expect(writes).toEqual([]);
  add('b', 1);
  add('a', 0);
  await batcher.flush();
  expect(writes).toEqual([[{ name: 'b', units: 1 }]]);
  expect(await recorded()).toEqual({ b: 1 });
});
