import { expect } from 'vitest';
import { createAdminAuditRepository, type Actor } from '../../src/audit/repository.js';
import { CREDITS_CODES } from '../../src/credits/errors.js';
import { createCreditsRules } from '../../src/credits/rules.js';
import { createCustomerRules } from '../../src/customers/rules.js';
import { databaseTest } from '../support/fixtures.js';

const test = databaseTest();

const OPERATOR: Actor = { name: 'test:credits-rules', adminTokenId: null };

test('an operation and its audit entry commit together, in the caller transaction when given; none on a missing owner', async ({
  database,
}) => {
  const { db } = database;
  // The limiter's store cannot tell here: the record is all there is.
  const rules = createCreditsRules(db, async () => undefined);
  const audit = createAdminAuditRepository(db);
  const trailOf = async (customerId: number) =>
    (await audit.page({ limit: 1_000 })).entries.filter((entry) => entry.details.customerId === customerId).reverse();
  const customer = await createCustomerRules(db).create({ externalId: 'cus_credits_rules' }, { actor: OPERATOR });

  await expect(
    db.transaction(async (tx) => {
      await rules.changeCustomer(customer.id, { operation: 'set', amount: 100 }, { tx, actor: OPERATOR });
      throw new Error('the request failed after the set');
    }),
  ).rejects.toThrow('the request failed');
  expect(await trailOf(customer.id)).toMatchObject([{ action: 'customer.create' }]);
  await expect(rules.changeCustomer(customer.id, { operation: 'decrement', amount: 1 }, { actor: OPERATOR })).rejects.toMatchObject({
    code: CREDITS_CODES.noCredits,
  });

  expect(await rules.changeCustomer(customer.id, { operation: 'set', amount: 100 }, { actor: OPERATOR })).toMatchObject({ remaining: 100 });
  expect(await rules.changeCustomer(customer.id, { operation: 'decrement', amount: 30 }, { actor: OPERATOR })).toMatchObject({
    remaining: 70,
  });
  await expect(rules.changeCustomer(customer.id, { operation: 'increment', amount: 0 }, { actor: OPERATOR })).rejects.toMatchObject({
    code: CREDITS_CODES.amount,
  });
  expect((await trailOf(customer.id)).slice(1)).toMatchObject([
    { action: 'customer.credits', keyId: null, details: { operation: 'set', amount: 100, before: null, after: { remaining: 100 } } },
    { action: 'customer.credits', details: { operation: 'decrement', amount: 30, before: { remaining: 100 }, after: { remaining: 70 } } },
  ]);
  expect(await rules.changeCustomer(2 ** 40, { operation: 'set', amount: 1 }, { actor: OPERATOR })).toBeUndefined();
  expect(await rules.changeKey(2 ** 40, { operation: 'set', amount: 1 }, { actor: OPERATOR })).toBeUndefined();
});
