import { describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { Redis } from 'ioredis';
import { commandCalls } from '../../harness/redis.js';
import type { CustomerLimits } from '../../src/api-keys/identity.js';
import type { NewApiKey } from '../../src/api-keys/repository.js';
import { createCustomerRules } from '../../src/customers/rules.js';
import { KEYS_COMMAND, openAdmin } from '../support/admin.js';
import { buildTestApp } from '../support/app.js';
import { POSTGRES_URL } from '../support/databases.js';
import { eventually } from '../support/eventually.js';
import { describeAppTest } from '../support/fixtures.js';
import { bearer, waitForKey, waitForKeyOnApp } from '../support/keys.js';
import { openSocket, type RawClient } from '../support/raw-socket.js';
import { RATE_LIMIT_STORES, REDIS_URL, redisStoreEnv, startRedis } from '../support/redis.js';
import { twoInstancesOn } from '../support/scale.js';
import { DAY, MINUTE, T0, type TestClock } from '../support/time.js';
import { minuteAndDay } from '../../src/plans/limits.js';

// Issue 48: a customer's limits bind all its keys together (one minute, day and concurrency),
// beside each key's own plan limits, on both stores and across instances.

let customers = 0;

/** A customer with these limits (null: none) and a key of it for each of `keys`, known to the app; the clock then at the start of a fresh day's minute. */
async function customerWithKeys(app: FastifyInstance, clock: TestClock, limits: CustomerLimits | null, keys: NewApiKey[]) {
  const customer = await createCustomerRules(app.db).create(
    { externalId: `cus_${++customers}_${clock.now()}`, limits },
    { actor: KEYS_COMMAND },
  );
  const created = [];
  for (const settings of keys) {
    const { key, record } = await app.apiKeysRepository.create({ ...settings, customerId: customer.id });
    const headers = bearer(key);
    // Each try a day later: waiting spends nothing of the windows a test then counts in.
    await waitForKey(async () => {
      clock.advance(DAY);
      return (await app.inject({ url: '/v1/pets/0', headers })).statusCode;
    });
    created.push({ headers, record });
  }
  clock.set((Math.floor(clock.now() / DAY) + 1) * DAY + 10 * MINUTE);
  return { customer, keys: created };
}

const get = (app: FastifyInstance, headers: { authorization: string }) => app.inject({ url: '/v1/pets?limit=1', headers });

/** The statuses of `count` reads of each key in turn. */
async function statusesOf(app: FastifyInstance, headers: { authorization: string }, count: number) {
  const statuses = [];
  for (let i = 0; i < count; i++) statuses.push((await get(app, headers)).statusCode);
  return statuses;
}

/** A create in flight for as long as the test likes: its headers sent, its body not (the slots are held from the headers on). */
async function slowCreate(port: number, headers: { authorization: string }): Promise<RawClient> {
  const client = await openSocket(port);
  client.socket.write(
    `POST /v1/pets HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: ${headers.authorization}\r\n` +
      'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"name":',
  );
  return client;
}

const ENTERPRISE = { plan: 'enterprise', limits: minuteAndDay(5, 100) } as const;

describe.each(RATE_LIMIT_STORES)("a customer's limits with the $name store", (store) => {
  const test = describeAppTest({
    clock: T0,
    envAtBuild: () => ({ ...store.env(), RATE_LIMIT_BAN_THRESHOLD: '2', RATE_LIMIT_CONCURRENCY: 'pro=50,enterprise=50' }),
  });

  describe.skipIf(store.usesRedis && !REDIS_URL)('', () => {
    test("two keys share its minute: 6 + 4 allowed, the 11th refused whichever key sends it; each key's own plan still applies; its refusals ban nobody", async ({
      t,
      clock,
    }) => {
      const limits = { limits: minuteAndDay(10, 1_000), concurrency: null };
      const { keys } = await customerWithKeys(t.app, clock, limits, [{ plan: 'pro' }, ENTERPRISE]);
      const [pro, enterprise] = keys.map((key) => key.headers) as [{ authorization: string }, { authorization: string }];

      expect(await statusesOf(t.app, pro, 6)).toEqual(Array(6).fill(200));
      const fourth = await get(t.app, enterprise);
      // The customer's minute has fewer left (10 - 7) than the key's own (5 - 1): the headers show it.
      expect(fourth.headers).toMatchObject({ 'x-ratelimit-limit': '10', 'x-ratelimit-remaining': '3' });
      expect(await statusesOf(t.app, enterprise, 3)).toEqual([200, 200, 200]);
      // The quota endpoint tells the same: the customer's minute, spent, binds the pro key with 294 of its own left.
      const quota = await t.app.inject({ url: '/v1/rate_limit', headers: pro });
      expect(quota.json()).toMatchObject({ plan: 'pro', minute: { limit: 10, remaining: 0, used: 10 } });
      for (const headers of [pro, enterprise, pro, pro, enterprise]) {
        const refused = await get(t.app, headers);
        expect(refused.statusCode).toBe(429);
        expect(refused.json()).toMatchObject({
          code: 'rate_limited',
          message: expect.stringContaining('Rate limit of 10 requests per minute'),
        });
        expect(refused.headers).toMatchObject({ 'retry-after': '60', 'x-ratelimit-limit': '10', 'x-ratelimit-remaining': '0' });
      }

      // The next minute: the enterprise key's own 5 a minute refuse its 6th while the customer has room.
      clock.advance(MINUTE);
      expect(await statusesOf(t.app, enterprise, 5)).toEqual(Array(5).fill(200));
      const own = await get(t.app, enterprise);
      expect(own.statusCode).toBe(429);
      expect(own.json().message).toContain('Rate limit of 5 requests per minute');
      // Its refusals count towards its ban (threshold 2); the pro key, refused by its customer only, is banned for none of its own.
      expect((await get(t.app, enterprise)).statusCode).toBe(429);
      expect((await get(t.app, enterprise)).json().code).toBe('api_key_banned');
      expect(await statusesOf(t.app, pro, 5)).toEqual([200, 200, 200, 200, 200]);
      expect((await get(t.app, pro)).json().code).toBe('rate_limited');
    });

    test('a free revalidation is taken back from both the key and its customer', async ({ t, clock }) => {
      const { keys } = await customerWithKeys(t.app, clock, { limits: minuteAndDay(3, 100), concurrency: null }, [{ plan: 'pro' }]);
      const { headers } = keys[0]!;
      const read = await get(t.app, headers);
      const revalidated = await t.app.inject({ url: '/v1/pets?limit=1', headers: { ...headers, 'if-none-match': read.headers.etag } });
      expect(revalidated.statusCode).toBe(304);
      expect(revalidated.headers['x-ratelimit-remaining']).toBe('2');
      expect(await statusesOf(t.app, headers, 3)).toEqual([200, 200, 429]);
    });

    test('its concurrency is shared: two slow requests of two keys hold its two slots, a third of either is refused until one ends', async ({
      t,
      clock,
      port,
    }) => {
      const limits = { limits: minuteAndDay(100, 1_000), concurrency: 2 };
      const { keys } = await customerWithKeys(t.app, clock, limits, [{ plan: 'pro' }, { plan: 'pro' }]);
      const [a, b] = keys as [(typeof keys)[0], (typeof keys)[0]];
      const inFlight = (key: (typeof keys)[0], count: number) =>
        eventually(async () => (await t.app.rateLimit.inFlight(key.record, t.app.now())) === count);
      const slow = [await slowCreate(port, a.headers), await slowCreate(port, b.headers)];
      await inFlight(a, 1);
      await inFlight(b, 1);
      for (const headers of [a.headers, b.headers]) {
        const refused = await get(t.app, headers);
        expect(refused.statusCode).toBe(429);
        expect(refused.json()).toMatchObject({
          code: 'concurrency_limited',
          message: "This API key's customer already has 2 requests in flight, its limit; retry one once another has been answered",
        });
      }
      slow[0]!.socket.destroy();
      await inFlight(a, 0);
      expect((await get(t.app, b.headers)).statusCode).toBe(200);
      slow[1]!.socket.destroy();
      await inFlight(b, 0);
    });

    test('quota lookups of its key take none of its concurrency slots: answered while its one slot is held, and it is free after them (issue 54)', async ({
      t,
      clock,
      port,
    }) => {
      const limits = { limits: minuteAndDay(100, 1_000), concurrency: 1 };
      const { keys } = await customerWithKeys(t.app, clock, limits, [{ plan: 'pro' }]);
      const { headers, record } = keys[0]!;
      const lookup = async () => (await t.app.inject({ url: '/v1/rate_limit', headers })).statusCode;
      for (let i = 0; i < 3; i++) expect(await lookup()).toBe(200);
      expect((await get(t.app, headers)).statusCode).toBe(200);
      const slow = await slowCreate(port, headers);
      await eventually(async () => (await t.app.rateLimit.inFlight(record, t.app.now())) === 1);
      expect(await lookup()).toBe(200);
      slow.socket.destroy();
      await eventually(async () => (await t.app.rateLimit.inFlight(record, t.app.now())) === 0);
      expect((await get(t.app, headers)).statusCode).toBe(200);
    });

    test('a PATCH of its limits takes effect on the running app; null removes them', async ({ t, clock }) => {
      const { customer, keys } = await customerWithKeys(t.app, clock, null, [{ plan: 'pro' }, { plan: 'pro' }]);
      const [a, b] = keys.map((key) => key.headers) as [{ authorization: string }, { authorization: string }];
      expect(await statusesOf(t.app, a, 5)).toEqual(Array(5).fill(200));
      const admin = await openAdmin(t.app);
      try {
        const patch = async (limits: unknown) => {
          const response = await admin.request('PATCH', `/admin/v1/customers/${customer.id}`, { json: { limits } });
          expect(response.status, JSON.stringify(response.body)).toBe(200);
          // The change's notice, about the customer's keys, is applied here once this resolves.
          expect(await t.app.keyNotices.catchUp()).toBe(true);
          clock.advance(MINUTE);
        };
        await patch({ perMinute: 3, perDay: 100 });
        expect([...(await statusesOf(t.app, a, 2)), ...(await statusesOf(t.app, b, 2))]).toEqual([200, 200, 200, 429]);
        await patch(null);
        expect(await statusesOf(t.app, b, 5)).toEqual(Array(5).fill(200));
      } finally {
        await admin.close();
      }
    });

    test("shadow mode stays the key's: a key with enforceLimits false is served past its customer's limits, with the headers of a refusal", async ({
      t,
      clock,
    }) => {
      const limits = { limits: minuteAndDay(2, 100), concurrency: null };
      const { keys } = await customerWithKeys(t.app, clock, limits, [{ plan: 'pro', enforceLimits: false }, { plan: 'pro' }]);
      const [shadow, enforced] = keys.map((key) => key.headers) as [{ authorization: string }, { authorization: string }];
      expect(await statusesOf(t.app, shadow, 2)).toEqual([200, 200]);
      const past = await get(t.app, shadow);
      expect(past.statusCode).toBe(200);
      expect(past.headers).toMatchObject({ 'x-ratelimit-limit': '2', 'x-ratelimit-remaining': '0' });
      // The customer's minute is spent for its other keys all the same.
      expect((await get(t.app, enforced)).json().code).toBe('rate_limited');
    });

    test('a key without a customer, and one of a customer without limits, are limited by their plan alone', async ({ t, clock }) => {
      const { key } = await t.app.apiKeysRepository.create({ plan: 'enterprise', limits: minuteAndDay(3, 100) });
      await waitForKey(async () => {
        clock.advance(DAY);
        return (await t.app.inject({ url: '/v1/pets/0', headers: bearer(key) })).statusCode;
      });
      const { keys } = await customerWithKeys(t.app, clock, null, [ENTERPRISE]);
      expect(await statusesOf(t.app, bearer(key), 4)).toEqual([200, 200, 200, 429]);
      const ofCustomer = await get(t.app, keys[0]!.headers);
      expect(ofCustomer.headers).toMatchObject({ 'x-ratelimit-limit': '5', 'x-ratelimit-remaining': '4' });
    });
  });
});

// Two instances on one PostgreSQL database and one Redis prefix: they share the counters, as instances in production do.
const twoInstances = twoInstancesOn(async () => ({ close: async () => {} }), redisStoreEnv);

describe.skipIf(!POSTGRES_URL || !REDIS_URL)('two instances on PostgreSQL and Redis', () => {
  twoInstances("share a customer's minute exactly, and both hear a change of its limits", async ({ instances, clock }) => {
    const [a, b] = instances;
    const { customer, keys } = await customerWithKeys(a.app, clock, { limits: minuteAndDay(10, 1_000), concurrency: null }, [
      { plan: 'pro' },
      { plan: 'pro' },
    ]);
    const [first, second] = keys.map((key) => key.headers) as [{ authorization: string }, { authorization: string }];
    // Known to b too (a's waiting moved the clock on by days, so these count in no window used below).
    await waitForKey(async () => (await get(b.app, second)).statusCode);
    await waitForKey(async () => (await get(b.app, first)).statusCode);
    clock.advance(MINUTE);

    const sent = [];
    for (let i = 0; i < 10; i++) sent.push(get(a.app, first), get(b.app, second));
    const statuses = (await Promise.all(sent)).map((response) => response.statusCode);
    expect(statuses.filter((status) => status === 200)).toHaveLength(10);
    expect(statuses.filter((status) => status === 429)).toHaveLength(10);

    // Changed on a (as its admin API would): b's key cache hears of it from the database.
    await createCustomerRules(a.app.db).update(
      customer.id,
      { limits: { limits: minuteAndDay(4, 1_000), concurrency: null } },
      { actor: KEYS_COMMAND },
    );
    expect(await b.app.keyNotices.catchUp()).toBe(true);
    expect(await a.app.keyNotices.catchUp()).toBe(true);
    clock.advance(MINUTE);
    const after = [...(await statusesOf(b.app, second, 3)), ...(await statusesOf(a.app, first, 2))];
    expect(after).toEqual([200, 200, 200, 200, 429]);
  });
});

describe.skipIf(!REDIS_URL)("the Redis commands of a customer's key's requests (a private Redis server, counting them)", () => {
  it("one script call decides the key's and its customer's windows and slots: no second round trip", async () => {
    const redis = await startRedis();
    const t = await buildTestApp({ REDIS_URL: redis.url, REDIS_KEY_PREFIX: 'calls:', RATE_LIMIT_CONCURRENCY: 'pro=100' });
    try {
      const limits = { limits: minuteAndDay(1_000, 10_000), concurrency: 100 };
      const customer = await createCustomerRules(t.app.db).create({ externalId: 'cus_calls', limits }, { actor: KEYS_COMMAND });
      const { key } = await t.app.apiKeysRepository.create({ plan: 'pro', customerId: customer.id });
      // The scripts loaded and the key known: what follows is the requests' own.
      await waitForKeyOnApp(t.app, bearer(key));
      const stats = new Redis(redis.url);
      await stats.config('RESETSTAT');
      stats.disconnect();
      const requests = 50;
      const statuses = await Promise.all(Array.from({ length: requests }, async () => (await get(t.app, bearer(key))).statusCode));
      expect(statuses.filter((status) => status !== 200)).toEqual([]);
      const { evalsha = 0, eval: evals = 0 } = await commandCalls(redis.url);
      expect(evalsha + evals).toBe(requests);
    } finally {
      await t.close();
      await redis.stop();
    }
  });
});
