import { describe, expect } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { createKey, openAdmin, type TestAdmin } from '../support/admin.js';
import { eventually } from '../support/eventually.js';
import { describeAppTest } from '../support/fixtures.js';
import { bearer, waitForKeyOnApp } from '../support/keys.js';
import { POSTGRES_URL } from '../support/databases.js';
import { RATE_LIMIT_STORES, REDIS_URL, redisStoreEnv } from '../support/redis.js';
import { twoInstancesOn } from '../support/scale.js';
import { T0 } from '../support/time.js';

// Issue 54, finding 2: the admin operations on credits act on what was really served (the store's
// live balance), not on the record, which lags the spending by up to a second.

type Headers = { authorization: string };

const get = (app: FastifyInstance, headers: Headers) => app.inject({ url: '/v1/pets?limit=1', headers });

/** `count` requests, 20 at a time (within the plan's concurrency), spread over the apps: how many were served. */
async function burst(apps: FastifyInstance[], headers: Headers, count: number) {
  let served = 0;
  for (let sent = 0; sent < count; sent += 20) {
    const statuses = await Promise.all(Array.from({ length: 20 }, async (_, i) => (await get(apps[i % apps.length]!, headers)).statusCode));
    served += statuses.filter((status) => status === 200).length;
  }
  return served;
}

/** Requests one after another, over the apps in turn, until one is refused: how many were served before it. */
async function servedUntilRefused(apps: FastifyInstance[], headers: Headers, most: number) {
  for (let served = 0; served <= most; served++) {
    const response = await get(apps[served % apps.length]!, headers);
    if (response.statusCode !== 200) {
      expect(response.json().code).toBe('credits_exhausted');
      return served;
    }
  }
  return most + 1;
}

const operate = (admin: TestAdmin, keyId: number, operation: string, amount: number) =>
  admin.request('POST', `/admin/v1/keys/${keyId}/credits`, { json: { operation, amount } });

/** A business key (1,000 a minute) known to every app, then given a balance of `remaining`, which every app has heard of. */
async function keyWithCredits(admin: TestAdmin, apps: FastifyInstance[], remaining: number) {
  const key = await createKey(admin, { plan: 'business' });
  for (const app of apps) await waitForKeyOnApp(app, bearer(key.key));
  expect((await operate(admin, key.id, 'set', remaining)).status).toBe(200);
  for (const app of apps) expect(await app.keyNotices.catchUp()).toBe(true);
  return { id: key.id, headers: bearer(key.key) };
}

/**
 * The burst, `decrement 10^12` (zero it out) and `increment 100` at once, before the ledger has
 * written all of the burst: then exactly 100 served, across all the apps.
 */
async function zeroedAndToppedUp(admin: TestAdmin, apps: FastifyInstance[]) {
  const { id, headers } = await keyWithCredits(admin, apps, 1_000);
  expect(await burst(apps, headers, 400)).toBe(400);
  const zeroed = await operate(admin, id, 'decrement', 1_000_000_000_000);
  expect(zeroed.status, JSON.stringify(zeroed.body)).toBe(200);
  expect(zeroed.body).toMatchObject({ remaining: 0 });
  const toppedUp = await operate(admin, id, 'increment', 100);
  expect(toppedUp.body).toMatchObject({ remaining: 100 });
  for (const app of apps) expect(await app.keyNotices.catchUp()).toBe(true);
  expect(await servedUntilRefused(apps, headers, 200)).toBe(100);
  return id;
}

describe.each(RATE_LIMIT_STORES)('the operations on credits against the live balance, with the $name store', (store) => {
  const test = describeAppTest({ clock: T0, envAtBuild: () => store.env() });

  describe.skipIf(store.usesRedis && !REDIS_URL)('', () => {
    test('a burst, decrement 10^12 and increment 100: exactly 100 units served, no hidden debt', async ({ t }) => {
      const admin = await openAdmin(t.app);
      try {
        await zeroedAndToppedUp(admin, [t.app]);
      } finally {
        await admin.close();
      }
    });

    test("a customer's balance spent by its key: a burst, decrement 10^12 and increment 100, exactly 100 served", async ({ t, clock }) => {
      const admin = await openAdmin(t.app);
      try {
        const customer = await admin.request('POST', '/admin/v1/customers', { json: { externalId: `cus_live_${clock.now()}` } });
        const key = await createKey(admin, { plan: 'business', customerId: customer.body.id });
        await waitForKeyOnApp(t.app, bearer(key.key));
        const path = `/admin/v1/customers/${customer.body.id}/credits`;
        const change = async (operation: string, amount: number) =>
          (await admin.request('POST', path, { json: { operation, amount } })).body;
        await change('set', 1_000);
        expect(await t.app.keyNotices.catchUp()).toBe(true);
        expect(await burst([t.app], bearer(key.key), 200)).toBe(200);
        expect(await change('decrement', 1_000_000_000_000)).toMatchObject({ remaining: 0 });
        expect(await change('increment', 100)).toMatchObject({ remaining: 100 });
        expect(await t.app.keyNotices.catchUp()).toBe(true);
        expect(await servedUntilRefused([t.app], bearer(key.key), 200)).toBe(100);
      } finally {
        await admin.close();
      }
    });

    test('a decrement takes its amount off what really remains: 300 spent of 1,000, decrement 600, exactly 100 served', async ({ t }) => {
      const admin = await openAdmin(t.app);
      try {
        const { id, headers } = await keyWithCredits(admin, [t.app], 1_000);
        expect(await burst([t.app], headers, 300)).toBe(300);
        const decremented = await operate(admin, id, 'decrement', 600);
        expect(decremented.body).toMatchObject({ remaining: 100 });
        expect(await t.app.keyNotices.catchUp()).toBe(true);
        expect(await servedUntilRefused([t.app], headers, 200)).toBe(100);
      } finally {
        await admin.close();
      }
    });
  });
});

const twoInstances = twoInstancesOn(
  async () => ({ close: async () => {} }),
  () => redisStoreEnv(),
);

describe.skipIf(!POSTGRES_URL || !REDIS_URL)('two instances on PostgreSQL and Redis', () => {
  twoInstances('a burst across both, decrement 10^12 and increment 100: exactly 100 served between them', async ({ instances }) => {
    const [a, b] = instances;
    const admin = await openAdmin(a.app);
    try {
      const keyId = await zeroedAndToppedUp(admin, [a.app, b.app]);
      // The record agrees once written: all of the 100 spent.
      await eventually(async () => (await admin.request('GET', `/admin/v1/keys/${keyId}`)).body.credits.remaining === 0);
    } finally {
      await admin.close();
    }
  });
});
