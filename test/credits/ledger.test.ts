import { describe, expect } from 'vitest';
import { CreditLedger } from '../../src/credits/ledger.js';
import { createLedgerRepository } from '../../src/credits/ledger-repository.js';
import type { Database } from '../../src/platform/db/database.js';
import { balanceRecord, failSpentWrites, insertCustomerBalance } from '../support/credit-balances.js';
import { eventually } from '../support/eventually.js';
import { databaseTest } from '../support/fixtures.js';
import { capturingLogger } from '../support/logs.js';

// Issue 55, item 5: the record of credits on a store of this instance's own (memory), the
// CreditLedger directly on a real database: spending added up in memory and written in batches.

/** A ledger on the database's record, as the credits plugin opens one without Redis; closed after the test. */
function openLedger(db: Database, onCleanup: (close: () => Promise<void>) => void) {
  const { log, warnings } = capturingLogger();
  const ledger = new CreditLedger(createLedgerRepository(db), log);
  onCleanup(() => ledger.close());
  /** Resolves once the ledger's writes (once a second) have brought the balance's record to `spent`. */
  const recorded = (id: number, spent: number) => eventually(async () => (await balanceRecord(db, id)).spent === spent);
  return { db, ledger, warnings, recorded };
}

/** `opened`: a ledger of the test's own on the file's database. */
const test = databaseTest().extend('opened', ({ database }, { onCleanup }) => openLedger(database.db, onCleanup));

const spentOf = async (db: Database, id: number) => (await balanceRecord(db, id)).spent;

describe('the ledger on a store of its own', () => {
  test('adds up spending and refunds per balance and version, and writes them in one batch, once', async ({
    opened: { db, ledger, recorded },
  }) => {
    const [a, b] = [await insertCustomerBalance(db, 100), await insertCustomerBalance(db, 100, { spent: 10 })];
    for (let i = 0; i < 5; i++) ledger.spend('customer:1', a, 1, 1);
    ledger.spend('customer:1', a, 1, -1);
    ledger.spend('customer:2', b, 1, 3);
    await recorded(a, 4);
    expect(await spentOf(db, b)).toBe(13);
    // Written once: the close's last write, with nothing spent since, adds nothing.
    await ledger.close();
    expect([await spentOf(db, a), await spentOf(db, b)]).toEqual([4, 13]);
  });

  test('drops spending of a version the record no longer holds (a set or refill replaced it), and never goes below 0', async ({
    opened: { db, ledger, recorded },
  }) => {
    const id = await insertCustomerBalance(db, 10, { spent: 2, version: 2 });
    // 5 units of version 1 (the record's no more), 1 of version 2.
    for (const [version, units] of [
      [1, 5],
      [2, 1],
    ] as const)
      ledger.spend('customer:1', id, version, units);
    await recorded(id, 3);
    expect((await balanceRecord(db, id)).version).toBe(2);
    // A refund of more than the record holds (its spending dropped meanwhile) leaves it at 0, and the batch written.
    ledger.spend('customer:1', id, 2, -5);
    await recorded(id, 0);
  });

  test('a failed write keeps its units: they reach the record with a later write, once', async ({
    opened: { db, ledger, warnings, recorded },
  }) => {
    const id = await insertCustomerBalance(db, 10);
    const writes = await failSpentWrites(db, id);
    for (let i = 0; i < 4; i++) ledger.spend('customer:1', id, 1, 1);
    await eventually(writes.failed);
    await eventually(async () => warnings().includes('credits: writing the spending failed; kept for the next write'));
    expect(await spentOf(db, id)).toBe(0);
    // Kept meanwhile, and what is spent meanwhile added to them: seed() counts both.
    ledger.spend('customer:1', id, 1, 1);
    expect(await ledger.seed(id, 1)).toEqual({ spent: 5, version: 1 });
    await writes.heal();
    await recorded(id, 5);
    await ledger.close();
    expect(await spentOf(db, id)).toBe(5);
  });

  test("seed() is the record and this instance's unwritten units of its version, each unit counted once", async ({
    opened: { db, ledger, recorded },
  }) => {
    const id = await insertCustomerBalance(db, 100, { spent: 20, version: 3 });
    ledger.spend('customer:1', id, 3, 5);
    // Another version's unwritten units are not this version's spending.
    ledger.spend('customer:1', id, 2, 7);
    // Written or not yet, each unit is in the record or in memory, not both.
    expect(await ledger.seed(id, 3)).toEqual({ spent: 25, version: 3 });
    await recorded(id, 25);
    expect(await ledger.seed(id, 3)).toEqual({ spent: 25, version: 3 });
    // A balance removed meanwhile counts as nothing spent, but what this instance spent of the claim's version.
    await db.query('DELETE FROM credit_balances WHERE id = $1', [id]);
    ledger.spend('customer:1', id, 4, 1);
    expect(await ledger.seed(id, 4)).toEqual({ spent: 1, version: 4 });
  });

  test('close writes what remains unwritten', async ({ database: { db } }) => {
    const ledger = new CreditLedger(createLedgerRepository(db), capturingLogger().log);
    const id = await insertCustomerBalance(db, 10);
    ledger.spend('customer:1', id, 1, 3);
    await ledger.close();
    expect(await spentOf(db, id)).toBe(3);
  });

  test('exhaustedOnce is true for one call of one ledger per balance and version, across two ledgers', async ({
    database: { db },
    onTestFinished,
  }) => {
    const [a, b] = [openLedger(db, onTestFinished).ledger, openLedger(db, onTestFinished).ledger];
    const id = await insertCustomerBalance(db, 1);
    const told = await Promise.all([a.exhaustedOnce(id, 1), b.exhaustedOnce(id, 1), a.exhaustedOnce(id, 1), b.exhaustedOnce(id, 1)]);
    expect(told.filter(Boolean)).toHaveLength(1);
    expect((await balanceRecord(db, id)).exhaustedVersion).toBe(1);
    // A set: a new version, told once again, by whichever ledger asks first.
    await db.query('UPDATE credit_balances SET spent = 0, version = 2 WHERE id = $1', [id]);
    expect(await b.exhaustedOnce(id, 2)).toBe(true);
    expect(await a.exhaustedOnce(id, 2)).toBe(false);
    expect(await b.exhaustedOnce(id, 2)).toBe(false);
  });

  test('exhaustedOnce that failed to mark may be asked again', async ({ opened: { db, ledger } }) => {
    const id = await insertCustomerBalance(db, 1);
    await db.query('ALTER TABLE credit_balances RENAME COLUMN exhausted_version TO exhausted_version_hidden');
    try {
      await expect(ledger.exhaustedOnce(id, 1)).rejects.toThrow();
    } finally {
      await db.query('ALTER TABLE credit_balances RENAME COLUMN exhausted_version_hidden TO exhausted_version');
    }
    expect(await ledger.exhaustedOnce(id, 1)).toBe(true);
  });
});
