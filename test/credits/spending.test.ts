import { describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { Redis } from 'ioredis';
import { commandCalls } from '../../harness/redis.js';
import type { NewApiKey } from '../../src/api-keys/repository.js';
import { createCustomerRules } from '../../src/customers/rules.js';
import { KEYS_COMMAND } from '../support/admin.js';
import { buildTestApp } from '../support/app.js';
import { balanceRecord, failSpentWrites, insertBalance, type BalanceOwner } from '../support/credit-balances.js';
import { eventually } from '../support/eventually.js';
import { describeAppTest } from '../support/fixtures.js';
import { bearer, waitForKey, waitForKeyOnApp } from '../support/keys.js';
import { POSTGRES_URL } from '../support/databases.js';
import { RATE_LIMIT_STORES, REDIS_URL, redisStoreEnv, startRedis } from '../support/redis.js';
import { twoInstancesOn } from '../support/scale.js';
import { DAY, MINUTE, T0, type TestClock } from '../support/time.js';
import { minuteAndDay } from '../../src/plans/limits.js';

// Issue 48, item 2: a request spends its cost from its key's and its customer's prepaid credits,
// decided with the windows in the same store call; a spent balance answers 429 credits_exhausted.

type Headers = { authorization: string };

let customers = 0;

/** A key known to the app (each try a day later, so waiting spends nothing a test counts); the clock then at a fresh day's minute. */
async function knownKey(app: FastifyInstance, clock: TestClock, settings: NewApiKey) {
  const { key, record } = await app.apiKeysRepository.create(settings);
  const headers = bearer(key);
  await waitForKey(async () => {
    clock.advance(DAY);
    return (await app.inject({ url: '/v1/pets/0', headers })).statusCode;
  });
  clock.set((Math.floor(clock.now() / DAY) + 1) * DAY + 10 * MINUTE);
  return { headers, record };
}

/** Gives the owner a balance and waits until the app has heard of it (the key change notice of migrations/016). */
async function withBalance(app: FastifyInstance, owner: BalanceOwner, base: number, options?: Parameters<typeof insertBalance>[3]) {
  const id = await insertBalance(app.db, owner, base, options);
  expect(await app.keyNotices.catchUp()).toBe(true);
  return id;
}

const newCustomer = (app: FastifyInstance, clock: TestClock) =>
  createCustomerRules(app.db).create({ externalId: `cus_credits_${++customers}_${clock.now()}`, limits: null }, { actor: KEYS_COMMAND });

const get = (app: FastifyInstance, headers: Headers, extra: Record<string, string> = {}) =>
  app.inject({ url: '/v1/pets?limit=1', headers: { ...headers, ...extra } });

async function statusesOf(app: FastifyInstance, headers: Headers, count: number) {
  const statuses = [];
  for (let i = 0; i < count; i++) statuses.push((await get(app, headers)).statusCode);
  return statuses;
}

const quotaCredits = async (app: FastifyInstance, headers: Headers) =>
  (await app.inject({ url: '/v1/rate_limit', headers })).json<{ credits: unknown }>().credits;

/** Waits until the record of the balance holds `spent`: the ledger writes at least once a second. */
const recorded = (app: FastifyInstance, id: number, spent: number) =>
  eventually(async () => (await balanceRecord(app.db, id)).spent === spent);

const NO_REFILL =
  "This API key's prepaid credits are spent: 0 units remain and this operation costs 1; they must be topped up before it is served";

/** Webhooks to a port where nothing listens (discard): deliveries fail, and the outbox keeps the events this file counts. */
const WEBHOOKS = { WEBHOOK_URL: 'http://127.0.0.1:9/hooks', WEBHOOK_SECRET: 'a-webhook-secret-of-32-characters-or-more' };

/** The credits.exhausted events recorded of a balance. */
const exhaustedEvents = (app: FastifyInstance, id: number) =>
  app.db.query<{ body: string }>(
    "SELECT body FROM webhook_deliveries WHERE type = 'credits.exhausted' AND body::jsonb->'data'->>'balanceId' = $1",
    [String(id)],
  );

describe.each(RATE_LIMIT_STORES)('prepaid credits with the $name store', (store) => {
  const test = describeAppTest({
    clock: T0,
    envAtBuild: () => ({
      ...store.env(),
      RATE_LIMIT_BAN_THRESHOLD: '2',
      RATE_LIMIT_SHADOW_PLANS: 'business',
      RATE_LIMIT_COSTS: 'createPet=3',
      ...WEBHOOKS,
    }),
  });

  describe.skipIf(store.usesRedis && !REDIS_URL)("requests spending a key's and its customer's balances", () => {
    test("a key's balance of 3 serves exactly 3 units, then 429 credits_exhausted without Retry-After; the record catches up", async ({
      t,
      clock,
    }) => {
      const { headers, record } = await knownKey(t.app, clock, { plan: 'pro' });
      const id = await withBalance(t.app, { quotaId: record.quotaId }, 3);
      expect(await statusesOf(t.app, headers, 3)).toEqual([200, 200, 200]);
      const refused = await get(t.app, headers);
      expect(refused.statusCode).toBe(429);
      expect(refused.json()).toEqual({ code: 'credits_exhausted', message: NO_REFILL, status: 429 });
      expect(refused.headers['retry-after']).toBeUndefined();
      // The X-RateLimit headers as they stand: the 3 served counted in the minute, the refusal not.
      expect(refused.headers).toMatchObject({ 'x-ratelimit-limit': '300', 'x-ratelimit-remaining': '297' });
      await recorded(t.app, id, 3);
    });

    test('with a refill, Retry-After is the time until it; costs count (a 5-unit create refused with 4 left)', async ({ t, clock }) => {
      const { headers, record } = await knownKey(t.app, clock, { plan: 'pro' });
      const refillAt = clock.now() + 90 * MINUTE;
      await withBalance(t.app, { quotaId: record.quotaId }, 4, { refillAt });
      // RATE_LIMIT_COSTS is unset: a create costs 1; the message names the units of the operation refused.
      expect(await statusesOf(t.app, headers, 4)).toEqual([200, 200, 200, 200]);
      const refused = await get(t.app, headers);
      expect(refused.statusCode).toBe(429);
      expect(refused.headers['retry-after']).toBe(String(90 * 60));
      expect(refused.json().message).toBe(
        "This API key's prepaid credits are spent: 0 units remain and this operation costs 1; they are refilled after the Retry-After delay",
      );
    });

    test("a customer's balance is shared by its two keys; the message names the customer's credits", async ({ t, clock }) => {
      const customer = await newCustomer(t.app, clock);
      const a = await knownKey(t.app, clock, { plan: 'pro', customerId: customer.id });
      const b = await knownKey(t.app, clock, { plan: 'pro', customerId: customer.id });
      const id = await withBalance(t.app, { customerId: customer.id }, 5);
      expect([...(await statusesOf(t.app, a.headers, 3)), ...(await statusesOf(t.app, b.headers, 2))]).toEqual([200, 200, 200, 200, 200]);
      for (const headers of [a.headers, b.headers]) {
        const refused = await get(t.app, headers);
        expect(refused.statusCode).toBe(429);
        expect(refused.json().message).toMatch(/^This API key's customer's prepaid credits are spent: 0 units remain/);
      }
      await recorded(t.app, id, 5);
    });

    test("the key's own balance and its customer's: whichever has fewer left refuses; the quota endpoint shows that one", async ({
      t,
      clock,
    }) => {
      const customer = await newCustomer(t.app, clock);
      const { headers, record } = await knownKey(t.app, clock, { plan: 'pro', customerId: customer.id });
      expect(await quotaCredits(t.app, headers)).toBeNull();
      const refillAt = clock.now() + 2 * DAY;
      await withBalance(t.app, { quotaId: record.quotaId }, 10);
      await withBalance(t.app, { customerId: customer.id }, 3, { refillAt });
      expect(await quotaCredits(t.app, headers)).toEqual({ remaining: 3, refillAt: new Date(refillAt).toISOString() });
      expect(await statusesOf(t.app, headers, 3)).toEqual([200, 200, 200]);
      const refused = await get(t.app, headers);
      expect(refused.json().message).toMatch(/^This API key's customer's prepaid credits are spent/);
      expect(refused.headers['retry-after']).toBe(String(2 * 24 * 3600));
      // The quota lookup spent nothing of either; the key's own has 7 left, the customer's none.
      expect(await quotaCredits(t.app, headers)).toEqual({ remaining: 0, refillAt: new Date(refillAt).toISOString() });
    });

    test("the key's and its customer's balances both spent, refilled at different times: Retry-After waits for the later", async ({
      t,
      clock,
    }) => {
      const customer = await newCustomer(t.app, clock);
      const { headers, record } = await knownKey(t.app, clock, { plan: 'pro', customerId: customer.id });
      // The key's refilled in an hour, its customer's in two days (either order): served only once both are.
      for (const [keyRefill, customerRefill] of [
        [clock.now() + 60 * MINUTE, clock.now() + 2 * DAY],
        [clock.now() + 2 * DAY, clock.now() + 60 * MINUTE],
      ]) {
        const keyBalance = await withBalance(t.app, { quotaId: record.quotaId }, 1, { refillAt: keyRefill });
        const customerBalance = await withBalance(t.app, { customerId: customer.id }, 1, { refillAt: customerRefill });
        expect(await statusesOf(t.app, headers, 1)).toEqual([200]);
        const refused = await get(t.app, headers);
        expect(refused.statusCode).toBe(429);
        expect(refused.headers['retry-after']).toBe(String(2 * 24 * 3600));
        await t.app.db.query('DELETE FROM credit_balances WHERE id = ANY($1::bigint[])', [[keyBalance, customerBalance]]);
        expect(await t.app.keyNotices.catchUp()).toBe(true);
      }
    });

    test('a refusal for credits counts in no window and towards no ban; a top-up serves again', async ({ t, clock }) => {
      const { headers, record } = await knownKey(t.app, clock, { plan: 'pro' });
      const id = await withBalance(t.app, { quotaId: record.quotaId }, 2);
      expect(await statusesOf(t.app, headers, 8)).toEqual([200, 200, 429, 429, 429, 429, 429, 429]);
      const codes = [];
      for (let i = 0; i < 3; i++) codes.push((await get(t.app, headers)).json().code);
      // Past the ban threshold of 2 refusals, and no ban: credits refusals are not rate-limit refusals.
      expect(codes).toEqual(['credits_exhausted', 'credits_exhausted', 'credits_exhausted']);
      const quota = await t.app.inject({ url: '/v1/rate_limit', headers });
      expect(quota.json()).toMatchObject({ minute: { used: 2 }, day: { used: 2 }, credits: { remaining: 0, refillAt: null } });
      // A top-up (the base moved, as an increment does) reaches the app by the key's notice.
      await recorded(t.app, id, 2);
      await t.app.db.query('UPDATE credit_balances SET base = base + 2 WHERE id = $1', [id]);
      expect(await t.app.keyNotices.catchUp()).toBe(true);
      expect(await statusesOf(t.app, headers, 3)).toEqual([200, 200, 429]);
    });

    test('a free revalidation (304) spends nothing of the balance', async ({ t, clock }) => {
      const { headers, record } = await knownKey(t.app, clock, { plan: 'pro' });
      const id = await withBalance(t.app, { quotaId: record.quotaId }, 2);
      const read = await get(t.app, headers);
      for (let i = 0; i < 3; i++)
        expect((await get(t.app, headers, { 'if-none-match': read.headers.etag as string })).statusCode).toBe(304);
      expect(await quotaCredits(t.app, headers)).toEqual({ remaining: 1, refillAt: null });
      expect(await statusesOf(t.app, headers, 2)).toEqual([200, 429]);
      await recorded(t.app, id, 2);
    });

    test('shadow mode still refuses for credits (money, not a limit under trial); past its windows it spends them', async ({
      t,
      clock,
    }) => {
      const shadow = await knownKey(t.app, clock, { plan: 'business' });
      await withBalance(t.app, { quotaId: shadow.record.quotaId }, 1);
      expect((await get(t.app, shadow.headers)).statusCode).toBe(200);
      const refused = await get(t.app, shadow.headers);
      expect(refused.statusCode).toBe(429);
      expect(refused.json().code).toBe('credits_exhausted');
      // A key not enforcing its minute of 2: the 3rd and 4th requests are past it, served, and spend a unit each.
      const off = await knownKey(t.app, clock, { plan: 'enterprise', limits: minuteAndDay(2, 100), enforceLimits: false });
      const id = await withBalance(t.app, { quotaId: off.record.quotaId }, 4);
      const answers = [];
      for (let i = 0; i < 5; i++) answers.push(await get(t.app, off.headers));
      expect(answers.map((answer) => answer.statusCode)).toEqual([200, 200, 200, 200, 429]);
      expect(answers.slice(2, 4).map((answer) => answer.headers['x-ratelimit-remaining'])).toEqual(['0', '0']);
      expect(answers[4]!.json().code).toBe('credits_exhausted');
      expect(await quotaCredits(t.app, off.headers)).toEqual({ remaining: 0, refillAt: null });
      await recorded(t.app, id, 4);
    });

    test('credits.exhausted is recorded once per balance and version, and again after a set (a new version)', async ({ t, clock }) => {
      const { headers, record } = await knownKey(t.app, clock, { plan: 'pro' });
      const id = await withBalance(t.app, { quotaId: record.quotaId }, 1);
      expect(await statusesOf(t.app, headers, 4)).toEqual([200, 429, 429, 429]);
      const events = () => exhaustedEvents(t.app, id);
      await eventually(async () => (await balanceRecord(t.app.db, id)).exhaustedVersion === 1);
      await eventually(async () => (await events()).length === 1);
      expect(JSON.parse((await events())[0]!.body)).toMatchObject({
        type: 'credits.exhausted',
        data: { keyId: record.id, owner: 'key', balanceId: id, remaining: 0, refillAt: null },
      });
      // A set: a new version, spending from 0 again; running out of it is told again.
      await t.app.db.query('UPDATE credit_balances SET base = 1, spent = 0, version = version + 1 WHERE id = $1', [id]);
      expect(await t.app.keyNotices.catchUp()).toBe(true);
      expect(await statusesOf(t.app, headers, 2)).toEqual([200, 429]);
      await eventually(async () => (await events()).length === 2);
      expect(await statusesOf(t.app, headers, 2)).toEqual([429, 429]);
      expect(await events()).toHaveLength(2);
    });

    test('a failed write of the ledger keeps its units: they reach the record with the next write', async ({ t, clock }) => {
      const { headers, record } = await knownKey(t.app, clock, { plan: 'pro' });
      const id = await withBalance(t.app, { quotaId: record.quotaId }, 10);
      const writes = await failSpentWrites(t.app.db, id);
      expect(await statusesOf(t.app, headers, 4)).toEqual([200, 200, 200, 200]);
      await eventually(writes.failed);
      expect((await balanceRecord(t.app.db, id)).spent).toBe(0);
      await writes.heal();
      await recorded(t.app, id, 4);
    });

    test('spending of a version written after a set (a new version) does not reduce the new balance', async ({ t, clock }) => {
      const { headers, record } = await knownKey(t.app, clock, { plan: 'pro' });
      const id = await withBalance(t.app, { quotaId: record.quotaId }, 10);
      const writes = await failSpentWrites(t.app.db, id);
      // 4 spent in version 1 and kept unwritten (its writes fail) until after the set of 10 (version 2).
      expect(await statusesOf(t.app, headers, 4)).toEqual([200, 200, 200, 200]);
      await eventually(writes.failed);
      await t.app.db.query('UPDATE credit_balances SET base = 10, spent = 0, version = version + 1 WHERE id = $1', [id]);
      expect(await t.app.keyNotices.catchUp()).toBe(true);
      expect(await statusesOf(t.app, headers, 1)).toEqual([200]);
      await writes.heal();
      // Written in one batch with the 4 of version 1: of them, only the 1 of version 2 counts.
      await recorded(t.app, id, 1);
      expect(await balanceRecord(t.app.db, id)).toMatchObject({ base: 10, spent: 1, version: 2 });
      expect(await statusesOf(t.app, headers, 10)).toEqual([...Array(9).fill(200), 429]);
    });

    test('credits.exhausted is told once, when the balance is at 0: not when a dearer request finds fewer units than it costs', async ({
      t,
      clock,
    }) => {
      const { headers, record } = await knownKey(t.app, clock, { plan: 'pro' });
      const id = await withBalance(t.app, { quotaId: record.quotaId }, 5);
      const create = () => t.app.inject({ method: 'POST', url: '/v1/pets', payload: { name: 'Priced', categoryId: 1 }, headers });
      // 5 - 3 leaves 2: fewer than a create costs, but a read still has them. A create is then refused, a read served.
      expect((await create()).statusCode).toBe(201);
      expect((await create()).json().code).toBe('credits_exhausted');
      expect(await statusesOf(t.app, headers, 3)).toEqual([200, 200, 429]);
      expect((await create()).statusCode).toBe(429);
      await eventually(async () => (await exhaustedEvents(t.app, id)).length === 1);
      // The one event names the balance at 0: it was not told at 2 (nor the once per version spent there).
      const events = await exhaustedEvents(t.app, id);
      expect(events.map(({ body }) => JSON.parse(body).data.remaining)).toEqual([0]);
    });
  });
});

describe.skipIf(!REDIS_URL)('the Redis commands of requests spending credits (a private Redis server, counting them)', () => {
  it("a customer's key with limits and both balances: one script call per request, the balances seeded once", async () => {
    const redis = await startRedis();
    const t = await buildTestApp({ REDIS_URL: redis.url, REDIS_KEY_PREFIX: 'credit-calls:', RATE_LIMIT_CONCURRENCY: 'pro=100' });
    try {
      const limits = { limits: minuteAndDay(1_000, 10_000), concurrency: 100 };
      const customer = await createCustomerRules(t.app.db).create({ externalId: 'cus_credit_calls', limits }, { actor: KEYS_COMMAND });
      const { key, record } = await t.app.apiKeysRepository.create({ plan: 'pro', customerId: customer.id });
      await waitForKeyOnApp(t.app, bearer(key));
      await withBalance(t.app, { quotaId: record.quotaId }, 1_000);
      await withBalance(t.app, { customerId: customer.id }, 1_000);
      // The first request seeds both balances from their records (a second script call); what follows is the requests' own.
      expect((await get(t.app, bearer(key))).statusCode).toBe(200);
      const stats = new Redis(redis.url);
      await stats.config('RESETSTAT');
      stats.disconnect();
      const requests = 50;
      const statuses = await Promise.all(Array.from({ length: requests }, async () => (await get(t.app, bearer(key))).statusCode));
      expect(statuses.filter((status) => status !== 200)).toEqual([]);
      const { evalsha = 0, eval: evals = 0, hincrby = 0 } = await commandCalls(redis.url);
      expect(evalsha + evals).toBe(requests);
      // Each request's script spent from both balances.
      expect(hincrby).toBe(2 * requests);
      expect(await quotaCredits(t.app, bearer(key))).toEqual({ remaining: 1_000 - requests - 1, refillAt: null });
    } finally {
      await t.close();
      await redis.stop();
    }
  });
});

describe.skipIf(!REDIS_URL)('a Redis flushed before the spending is written (a private Redis server)', () => {
  it('the balance is seeded from its record and what this instance has not written yet: exactly the balance served', async () => {
    const redis = await startRedis();
    const t = await buildTestApp({ REDIS_URL: redis.url, REDIS_KEY_PREFIX: 'credit-flush:' });
    try {
      const { key, record } = await t.app.apiKeysRepository.create({ plan: 'pro' });
      await waitForKeyOnApp(t.app, bearer(key));
      await withBalance(t.app, { quotaId: record.quotaId }, 50);
      const before = await statusesOf(t.app, bearer(key), 30);
      // At once: the ledger writes once a second, so most of the 30 are in this instance's memory only.
      const client = new Redis(redis.url);
      await client.flushall();
      client.disconnect();
      const after = await statusesOf(t.app, bearer(key), 30);
      expect(before.filter((status) => status === 200)).toHaveLength(30);
      expect(after.filter((status) => status === 200)).toHaveLength(20);
      expect(await quotaCredits(t.app, bearer(key))).toEqual({ remaining: 0, refillAt: null });
    } finally {
      await t.close();
      await redis.stop();
    }
  });
});

// Two instances on one PostgreSQL database and one Redis prefix, as instances in production.
const twoInstances = twoInstancesOn(
  async () => ({ close: async () => {} }),
  () => ({ ...redisStoreEnv(), ...WEBHOOKS }),
);

describe.skipIf(!POSTGRES_URL || !REDIS_URL)('two instances on PostgreSQL and Redis', () => {
  twoInstances("spend a customer's balance exactly, and record its credits.exhausted once between them", async ({ instances, clock }) => {
    const [a, b] = instances;
    const customer = await newCustomer(a.app, clock);
    const keys = await Promise.all([1, 2].map(() => a.app.apiKeysRepository.create({ plan: 'pro', customerId: customer.id })));
    for (const { key } of keys) for (const { app } of [a, b]) await waitForKeyOnApp(app, bearer(key));
    const id = await insertBalance(a.app.db, { customerId: customer.id }, 10);
    for (const { app } of [a, b]) expect(await app.keyNotices.catchUp()).toBe(true);
    clock.advance(DAY);
    const sent = [];
    for (let i = 0; i < 15; i++) sent.push(get(a.app, bearer(keys[0]!.key)), get(b.app, bearer(keys[1]!.key)));
    const statuses = (await Promise.all(sent)).map((response) => response.statusCode);
    expect(statuses.filter((status) => status === 200)).toHaveLength(10);
    expect(statuses.filter((status) => status === 429)).toHaveLength(20);
    await recorded(a.app, id, 10);
    await eventually(async () => (await exhaustedEvents(a.app, id)).length === 1);
    // Both instances refused for it, and both asked: the record's mark let one of them tell it.
    expect(await statusesOf(b.app, bearer(keys[1]!.key), 2)).toEqual([429, 429]);
    expect(await exhaustedEvents(a.app, id)).toHaveLength(1);
    expect((await balanceRecord(a.app.db, id)).exhaustedVersion).toBe(1);
  });
});
