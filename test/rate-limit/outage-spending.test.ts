import { expect } from 'vitest';
import { createApiKeysRepository } from '../../src/api-keys/repository.js';
import { createLedgerRepository } from '../../src/credits/ledger-repository.js';
import { createCustomerRules } from '../../src/customers/rules.js';
import type { Database } from '../../src/platform/db/database.js';
import type { BalanceRecords } from '../../src/credits/ports.js';
import { OutageSpending } from '../../src/rate-limit/stores/outage-spending.js';
import { KEYS_COMMAND } from '../support/admin.js';
import { balanceRecord, insertBalance } from '../support/credit-balances.js';
import { databaseTest } from '../support/fixtures.js';

// Issue 54, finding 3: while Redis is unreachable, a balance's spending in its record is batched:
// the requests of a balance wait in memory while its transaction is under way, and the next
// decides all of them, in order, each all or none, exactly as one transaction each would.

const test = databaseTest();

/** The record of credits as the fallback uses it, counting its transactions (a lone request's statement one). */
function countedRecord(db: Database) {
  const record = createLedgerRepository(db);
  const counted = { transactions: 0 };
  const recorded: BalanceRecords = {
    ...record,
    spendLocked: (ids, decide) => {
      counted.transactions++;
      return record.spendLocked(ids, decide);
    },
    spendAtOnce: (ids, cost, count) => {
      counted.transactions++;
      return record.spendAtOnce(ids, cost, count);
    },
  };
  return { recorded, counted };
}

let customers = 0;
/** A key with a balance of its own (`own`) and its customer's (`shared`), and another key of the customer without one. */
async function keyAndCustomer(db: Database, own: number, shared: number) {
  const customer = await createCustomerRules(db).create(
    { externalId: `cus_spending_${++customers}`, limits: null },
    { actor: KEYS_COMMAND },
  );
  const { record } = await createApiKeysRepository(db).create({ plan: 'pro', customerId: customer.id });
  const keyBalance = await insertBalance(db, { quotaId: record.quotaId }, own);
  const customerBalance = await insertBalance(db, { customerId: customer.id }, shared);
  return { keyBalance, customerBalance, spent: async (id: number) => (await balanceRecord(db, id)).spent };
}

test('200 requests of one balance at once cost two transactions, and are served in order while its 120 units last', async ({
  database,
}) => {
  const { customerBalance, spent } = await keyAndCustomer(database.db, 1, 120);
  const { recorded, counted } = countedRecord(database.db);
  const spending = new OutageSpending(recorded);
  const answers = await Promise.all(Array.from({ length: 200 }, () => spending.spend([customerBalance], 1)));
  // The first alone, at once; the 199 that arrived while it was under way, together.
  expect(counted.transactions).toBe(2);
  expect(answers.map(({ spent }) => spent)).toEqual([...Array(120).fill(true), ...Array(80).fill(false)]);
  expect(answers.map(({ balances }) => balances[0]!.remaining)).toEqual([
    ...Array.from({ length: 120 }, (_, i) => 119 - i),
    ...Array(80).fill(0),
  ]);
  expect(await spent(customerBalance)).toBe(120);
});

test("alike requests of a key's two balances cost 3 each: as many served, in order, as both hold", async ({ database }) => {
  const { keyBalance, customerBalance, spent } = await keyAndCustomer(database.db, 10, 100);
  const spending = new OutageSpending(countedRecord(database.db).recorded);
  const answers = await Promise.all(Array.from({ length: 5 }, () => spending.spend([keyBalance, customerBalance], 3)));
  expect(answers.map(({ spent }) => spent)).toEqual([true, true, true, false, false]);
  expect(answers.map(({ balances }) => balances.map(({ remaining }) => remaining))).toEqual([
    [7, 97],
    [4, 94],
    [1, 91],
    [1, 91],
    [1, 91],
  ]);
  expect([await spent(keyBalance), await spent(customerBalance)]).toEqual([9, 9]);
});

test("a batch decides each request all or none, in order: a key's balance and its customer's, or the customer's alone", async ({
  database,
}) => {
  const { keyBalance, customerBalance, spent } = await keyAndCustomer(database.db, 5, 9);
  const spending = new OutageSpending(countedRecord(database.db).recorded);
  const both = [keyBalance, customerBalance];
  const answers = await Promise.all([
    spending.spend(both, 3),
    spending.spend(both, 3), // the key's 2 left cannot pay: neither balance spends
    spending.spend([customerBalance], 3),
    spending.spend(both, 1),
    spending.spend(both, 2), // the key's 1 left cannot pay
    spending.spend([customerBalance], 2), // the customer's 2 left pay
    spending.spend([customerBalance], 1), // nothing left
  ]);
  expect(answers.map(({ spent }) => spent)).toEqual([true, false, true, true, false, true, false]);
  expect(answers[3].balances).toEqual([
    { id: keyBalance, remaining: 1, version: 1 },
    { id: customerBalance, remaining: 2, version: 1 },
  ]);
  expect([await spent(keyBalance), await spent(customerBalance)]).toEqual([4, 9]);
});

test('two instances batching apart spend exactly what remains: the row lock orders their transactions', async ({ database }) => {
  const { keyBalance, customerBalance, spent } = await keyAndCustomer(database.db, 1_000, 100);
  const [a, b] = [0, 1].map(() => new OutageSpending(countedRecord(database.db).recorded)) as [OutageSpending, OutageSpending];
  const sent = [];
  for (let i = 0; i < 150; i++) sent.push(a.spend([keyBalance, customerBalance], 1), b.spend([customerBalance], 1));
  const answers = await Promise.all(sent);
  expect(answers.filter(({ spent }) => spent)).toHaveLength(100);
  expect(await spent(customerBalance)).toBe(100);
  expect(await spent(keyBalance)).toBe(answers.filter(({ spent }, i) => spent && i % 2 === 0).length);
});

test("lone requests of 100 instances at once, each in one statement: exactly what remains of a key's and its customer's balances", async ({
  database,
}) => {
  const { keyBalance, customerBalance, spent } = await keyAndCustomer(database.db, 70, 60);
  const instances = Array.from({ length: 100 }, () => new OutageSpending(countedRecord(database.db).recorded));
  const answers = await Promise.all(instances.map((instance) => instance.spend([keyBalance, customerBalance], 1)));
  expect(answers.filter(({ spent }) => spent)).toHaveLength(60);
  expect([await spent(keyBalance), await spent(customerBalance)]).toEqual([60, 60]);
  expect(answers.filter(({ spent }) => !spent).map(({ balances }) => balances[1]!.remaining)).toEqual(Array(40).fill(0));
});
