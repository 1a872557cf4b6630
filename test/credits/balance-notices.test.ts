import { describe, expect } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { generateKey, hashKey } from '../../src/api-keys/format.js';
import { createCustomerRules } from '../../src/customers/rules.js';
import { KEYS_COMMAND } from '../support/admin.js';
import { insertBalance } from '../support/credit-balances.js';
import { describeAppTest } from '../support/fixtures.js';
import { bearer, keyLookups } from '../support/keys.js';
import { eventually } from '../support/eventually.js';

// Issue 54, finding 7: a change of a customer's balance reaches the keys of that customer that
// each instance holds, not every key it holds (the notice named '*' past 100 keys).

/** Keys stored at once (one statement), of the customer given or of none. */
async function storeKeys(app: FastifyInstance, count: number, customerId: number | null) {
  const keys = Array.from({ length: count }, generateKey);
  await app.db.query("INSERT INTO api_keys (plan, key_hash, customer_id) SELECT 'pro', h, $2 FROM unnest($1::bytea[]) AS h", [
    keys.map(hashKey),
    customerId,
  ]);
  return keys;
}

describe("a customer's balance topped up", () => {
  const test = describeAppTest();

  test('with 101 keys: 200 unrelated keys in use stay cached (no lookup); its own key cached is looked up again', async ({ t }) => {
    const customer = await createCustomerRules(t.app.db).create({ externalId: 'cus_many_keys', limits: null }, { actor: KEYS_COMMAND });
    const [ownKey] = await storeKeys(t.app, 101, customer.id);
    const unrelated = await storeKeys(t.app, 200, null);
    // Their notices ('*': over 100 keys each) applied before any is cached.
    expect(await t.app.keyNotices.catchUp()).toBe(true);
    // Each from an address of its own: unseen keys are limited per address.
    const get = (key: string, n: number) =>
      t.app.inject({ url: '/v1/pets?limit=1', headers: bearer(key), remoteAddress: `10.1.${n >> 8}.${n & 255}` });
    await eventually(async () => (await get(ownKey!, 300)).statusCode === 200);
    for (const [n, key] of unrelated.entries()) expect((await get(key, n)).statusCode).toBe(200);

    const balanceId = await insertBalance(t.app.db, { customerId: customer.id }, 1_000);
    expect(await t.app.keyNotices.catchUp()).toBe(true);
    const lookups = await keyLookups(t.app);
    for (let i = 0; i < 5; i++) {
      await t.app.db.query('UPDATE credit_balances SET base = base + 100 WHERE id = $1', [balanceId]);
      expect(await t.app.keyNotices.catchUp()).toBe(true);
    }
    for (const key of unrelated) expect(t.app.keyCache.get(t.app.keyCache.knownHash(key) ?? 'forgotten')).toMatchObject({ plan: 'pro' });
    for (const [n, key] of unrelated.entries()) expect((await get(key, n)).statusCode).toBe(200);
    expect(await keyLookups(t.app)).toBe(lookups);
    // The customer's key is told: looked up again, with its balance.
    expect(t.app.keyCache.get(t.app.keyCache.knownHash(ownKey!)!)).toBe('stale');
    expect((await get(ownKey!, 300)).statusCode).toBe(200);
    expect(await keyLookups(t.app)).toBe(lookups + 1);
    expect(t.app.keyCache.get(t.app.keyCache.knownHash(ownKey!)!)).toMatchObject({ customerCredits: { id: balanceId, base: 1_500 } });
  });
});
