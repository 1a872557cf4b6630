import { expect } from 'vitest';
import { createAdminAuditRepository, type Actor } from '../../src/audit/repository.js';
import { createCustomersRepository } from '../../src/customers/repository.js';
import { createCustomerRules, customerLimitsOf, type LimitsInput } from '../../src/customers/rules.js';
import type { Database } from '../../src/platform/db/database.js';
import { databaseTest } from '../support/fixtures.js';
import { minuteAndDay } from '../../src/plans/limits.js';

const test = databaseTest();

const OPERATOR: Actor = { name: 'test:customer-rules', adminTokenId: null };
const CREDITS = { remaining: 500, refill: null, nextRefillAt: null };
/** Limits as a body gives them, checked as the admin API checks them. */
const limitsOf = (input: LimitsInput) => customerLimitsOf(input, {})!;
const MINUTE_AND_DAY = {
  perMinute: 10,
  perDay: 100,
  windows: minuteAndDay(10, 100),
  concurrency: null,
};

function rulesOn(db: Database) {
  const audit = createAdminAuditRepository(db);
  /** The audit entries of a customer, oldest first. */
  const trailOf = async (customerId: number) =>
    (await audit.page({ limit: 1_000 })).entries.filter((entry) => entry.details.customerId === customerId).reverse();
  return { rules: createCustomerRules(db), customers: createCustomersRepository(db), trailOf };
}

test('create stores the customer, its credits and its audit entry in the caller transaction: rolled back, none is left', async ({
  database,
}) => {
  const { rules, customers, trailOf } = rulesOn(database.db);
  let createdId: number | undefined;
  await expect(
    database.db.transaction(async (tx) => {
      createdId = (await rules.create({ externalId: 'cus_rolled_back', credits: CREDITS }, { tx, actor: OPERATOR })).id;
      throw new Error('the request failed after the customer was made');
    }),
  ).rejects.toThrow('the request failed');
  expect(await customers.get(createdId!)).toBeUndefined();
  expect(await trailOf(createdId!)).toEqual([]);

  const customer = await rules.create({ externalId: 'cus_kept', credits: CREDITS }, { actor: OPERATOR });
  expect(customer).toMatchObject({ externalId: 'cus_kept', name: '', limits: null, credits: { remaining: 500, refill: null } });
  expect(await rules.get(customer.id)).toEqual(customer);
  expect(await trailOf(customer.id)).toMatchObject([
    {
      action: 'customer.create',
      actor: 'test:customer-rules',
      keyId: null,
      details: { customerId: customer.id, externalId: 'cus_kept', name: '', limits: null, credits: { remaining: 500 } },
    },
  ]);
});

test('update records the values before and after with the change; a change to what it is records nothing', async ({ database }) => {
  const { rules, trailOf } = rulesOn(database.db);
  const { id } = await rules.create({ externalId: 'cus_changed', limits: limitsOf({ perMinute: 10, perDay: 100 }) }, { actor: OPERATOR });
  const sameWindows = limitsOf([
    { name: 'day', limit: 100, windowSeconds: 86_400 },
    { name: 'minute', limit: 10, windowSeconds: 60, algorithm: 'fixed' },
  ]);
  expect(await rules.update(id, { name: '', limits: sameWindows }, { actor: OPERATOR })).toMatchObject({
    name: '',
    limits: MINUTE_AND_DAY,
  });
  expect(await trailOf(id)).toHaveLength(1);

  const changed = await rules.update(id, { name: 'Acme', credits: CREDITS }, { actor: OPERATOR });
  expect(changed).toMatchObject({ id, name: 'Acme', credits: { remaining: 500 } });
  expect((await trailOf(id)).at(-1)).toMatchObject({
    action: 'customer.update',
    details: {
      customerId: id,
      before: { externalId: 'cus_changed', name: '', limits: MINUTE_AND_DAY, credits: null },
      after: {
        externalId: 'cus_changed',
        name: 'Acme',
        limits: MINUTE_AND_DAY,
        credits: { remaining: 500 },
      },
    },
  });
  expect(await rules.update(2 ** 40, { name: 'nobody' }, { actor: OPERATOR })).toBeUndefined();
});
