import { minuteAndDay } from '../../src/plans/limits.js';
import { describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { Redis } from 'ioredis';
import { createCustomerRules } from '../../src/customers/rules.js';
import { KEYS_COMMAND } from '../support/admin.js';
import { buildTestApp, type TestApp } from '../support/app.js';
import { balanceRecord, insertBalance } from '../support/credit-balances.js';
import { POSTGRES_URL } from '../support/databases.js';
import { eventually } from '../support/eventually.js';
import { bearer, waitForKeyOnApp } from '../support/keys.js';
import { REDIS_URL, startRedis } from '../support/redis.js';
import { fallbackGauge } from '../support/scale.js';

// Issue 48, item 2: credits are money, and a Redis outage must not hand a balance out again.
// While Redis is unreachable, the limiter decides the windows in each instance's memory and the
// balances in their record in PostgreSQL (docs/decisions/credits.md, "Redis unreachable").

type Headers = { authorization: string };

const get = (app: FastifyInstance, headers: Headers, extra: Record<string, string> = {}) =>
  app.inject({ url: '/v1/pets?limit=1', headers: { ...headers, ...extra } });

async function statusesOf(app: FastifyInstance, headers: Headers, count: number) {
  const statuses = [];
  for (let i = 0; i < count; i++) statuses.push((await get(app, headers)).statusCode);
  return statuses;
}

/** Each status answered, counted. */
const tally = (statuses: number[]) =>
  statuses.reduce<Record<number, number>>((counts, s) => ({ ...counts, [s]: (counts[s] ?? 0) + 1 }), {});

/** Waits until the record of the balance holds `spent`: the ledger writes at least once a second. */
const recorded = (app: FastifyInstance, id: number, spent: number) =>
  eventually(async () => (await balanceRecord(app.db, id)).spent === spent);

const quotaCredits = async (app: FastifyInstance, headers: Headers) =>
  (await app.inject({ url: '/v1/rate_limit', headers })).json<{ credits: unknown }>().credits;

/**
 * A Redis server of the test's own and what cuts the instances off it: their connections killed,
 * and a password they do not know, so they cannot come back; what Redis holds stays.
 */
async function redisToCut() {
  const redis = await startRedis();
  const admin = new Redis(redis.url);
  return {
    url: redis.url,
    cut: async () => {
      await admin.config('SET', 'requirepass', 'outage');
      await admin.client('KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
    },
    restore: () => admin.config('SET', 'requirepass', ''),
    stop: async () => {
      admin.disconnect();
      await redis.stop();
    },
  };
}

/** The instances limiting from memory, each having found Redis unreachable on a request of the tests' own key. */
async function degraded(instances: readonly TestApp[]) {
  for (const t of instances) await t.app.inject({ url: '/v1/pets?limit=1', headers: t.auth });
  for (const t of instances) await eventually(async () => (await fallbackGauge(t)) === 1);
}

/** A balance given to an owner, once every instance has heard of it (the key change notice of migrations/016). */
async function withBalance(instances: readonly TestApp[], owner: Parameters<typeof insertBalance>[1], base: number) {
  const id = await insertBalance(instances[0]!.db, owner, base);
  for (const t of instances) expect(await t.app.keyNotices.catchUp()).toBe(true);
  return id;
}

describe.skipIf(!REDIS_URL)('credits while Redis is unreachable, one instance (a private Redis server, refusing it for a while)', () => {
  it('spends in the record meanwhile; back on Redis, a balance spent meanwhile is seeded again from the record', async () => {
    const redis = await redisToCut();
    const t = await buildTestApp({ REDIS_URL: redis.url, REDIS_KEY_PREFIX: 'credit-outage:' });
    try {
      const { key, record } = await t.app.apiKeysRepository.create({ plan: 'pro' });
      await waitForKeyOnApp(t.app, bearer(key));
      const id = await withBalance([t], { quotaId: record.quotaId }, 10);
      expect(await statusesOf(t.app, bearer(key), 3)).toEqual([200, 200, 200]);
      await recorded(t.app, id, 3);
      await redis.cut();
      expect(await statusesOf(t.app, bearer(key), 4)).toEqual([200, 200, 200, 200]);
      expect(await fallbackGauge(t)).toBe(1);
      // Spent in the record itself, not a second later by the ledger.
      expect((await balanceRecord(t.db, id)).spent).toBe(7);
      await redis.restore();
      await eventually(async () => (await fallbackGauge(t)) === 0, 10_000);
      // Redis still holds 3 spent: the balance spent meanwhile was dropped from it, and seeded again from the record (7).
      expect(await statusesOf(t.app, bearer(key), 4)).toEqual([200, 200, 200, 429]);
      await recorded(t.app, id, 10);
    } finally {
      await t.close();
      await redis.stop();
    }
  });
});

describe.skipIf(!POSTGRES_URL || !REDIS_URL)('credits while Redis is unreachable, two instances on one PostgreSQL', () => {
  it("serve exactly what remains of a customer's balance, spend nothing on a 304, and reseed it exactly once Redis is back", async () => {
    const redis = await redisToCut();
    // 150 requests of a key in flight at once on each instance, each waiting its turn for the balance's row: refused for
    // credits only, not for concurrency (slots to spare), nor shed for the requests queued for a database connection.
    const env = {
      REDIS_URL: redis.url,
      REDIS_KEY_PREFIX: 'credit-outage-two:',
      RATE_LIMIT_CONCURRENCY: 'pro=1000',
      LOAD_SHED_POOL_WAITING: '1000',
    };
    const a = await buildTestApp(env);
    const b = await buildTestApp({ ...env, DATABASE_URL: a.databaseUrl! });
    const instances = [a, b] as const;
    try {
      // With limits of its own, its keys' requests are decided with the customer's windows and slots (decideShared).
      const limits = { limits: minuteAndDay(1_000, 10_000), concurrency: 1_000 };
      const customer = await createCustomerRules(a.db).create({ externalId: 'cus_outage', limits }, { actor: KEYS_COMMAND });
      const [one, two, alone] = await Promise.all(
        [customer.id, customer.id, undefined].map((customerId) => a.app.apiKeysRepository.create({ plan: 'pro', customerId })),
      );
      for (const { key } of [one!, two!, alone!]) for (const { app } of instances) await waitForKeyOnApp(app, bearer(key));
      const id = await withBalance(instances, { customerId: customer.id }, 110);
      // 10 spent on Redis first: the copy Redis holds of the balance, which the outage's spending must not be served from again.
      expect([...(await statusesOf(a.app, bearer(one!.key), 5)), ...(await statusesOf(b.app, bearer(two!.key), 5))]).toEqual(
        Array(10).fill(200),
      );
      await recorded(a.app, id, 10);
      const ownId = await withBalance(instances, { quotaId: alone!.record.quotaId }, 2);

      await redis.cut();
      await degraded(instances);
      // 300 requests at once, half on each instance (each on a key of the customer): exactly the 100 left are served.
      const sent = [];
      for (let i = 0; i < 150; i++) sent.push(get(a.app, bearer(one!.key)), get(b.app, bearer(two!.key)));
      const answers = await Promise.all(sent);
      expect(tally(answers.map(({ statusCode }) => statusCode))).toEqual({ 200: 100, 429: 200 });
      const codes = new Set(answers.filter(({ statusCode }) => statusCode === 429).map((answer) => answer.json<{ code: string }>().code));
      expect([...codes]).toEqual(['credits_exhausted']);
      expect((await balanceRecord(a.db, id)).spent).toBe(110);

      // A key's own balance of 2: one read spends 1, in the record at once; revalidations on both instances spend nothing
      // (the first on each counted, then given back; the next ones known current, only checked).
      const read = await get(a.app, bearer(alone!.key));
      expect(read.statusCode).toBe(200);
      expect((await balanceRecord(a.db, ownId)).spent).toBe(1);
      for (const { app } of [a, a, b, b])
        expect((await get(app, bearer(alone!.key), { 'if-none-match': read.headers.etag as string })).statusCode).toBe(304);
      expect((await balanceRecord(a.db, ownId)).spent).toBe(1);
      expect(await quotaCredits(b.app, bearer(alone!.key))).toEqual({ remaining: 1, refillAt: null });
      expect([(await get(b.app, bearer(alone!.key))).statusCode, (await get(a.app, bearer(alone!.key))).statusCode]).toEqual([200, 429]);

      await redis.restore();
      for (const t of instances) await eventually(async () => (await fallbackGauge(t)) === 0, 10_000);
      // Back on Redis, the balance is seeded again from the record: nothing remains, on either instance.
      expect([(await get(a.app, bearer(one!.key))).statusCode, (await get(b.app, bearer(two!.key))).statusCode]).toEqual([429, 429]);
      expect(await quotaCredits(a.app, bearer(one!.key))).toEqual({ remaining: 0, refillAt: null });
      // A top-up of 5 serves exactly 5 of 20, across both instances; the record then holds all of it spent, counted once.
      await a.db.query('UPDATE credit_balances SET base = base + 5 WHERE id = $1', [id]);
      for (const { app } of instances) expect(await app.keyNotices.catchUp()).toBe(true);
      const more = [];
      for (let i = 0; i < 10; i++) more.push(get(a.app, bearer(one!.key)), get(b.app, bearer(two!.key)));
      expect(tally((await Promise.all(more)).map(({ statusCode }) => statusCode))).toEqual({ 200: 5, 429: 15 });
      await recorded(a.app, id, 115);
      await recorded(a.app, ownId, 2);
    } finally {
      await Promise.all([b.close(), a.close()]);
      await redis.stop();
    }
  });
});
