import { describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { loadConfig } from '../../src/config/load.js';
import { minuteAndDay } from '../../src/plans/limits.js';
import { MemoryStore } from '../../src/rate-limit/stores/memory-store.js';
import type { Decision } from '../../src/rate-limit/stores/store.js';
import { RedisStore } from '../../src/rate-limit/stores/redis-store.js';
import { describeAppTest } from '../support/fixtures.js';
import { buildTestApp } from '../support/app.js';
import { keyInFreshWindows } from '../support/keys.js';
import { deleteKeys } from '../../harness/redis.js';
import { RATE_LIMIT_STORES, REDIS_URL, redisStoreEnv } from '../support/redis.js';
import { DAY, MINUTE, T0 } from '../support/time.js';

describe('RATE_LIMIT_COSTS', () => {
  it('prices operations by operationId, 1 to 1000 units each; unset, none', () => {
    expect(loadConfig({}).rateLimitCosts).toEqual({});
    expect(loadConfig({ RATE_LIMIT_COSTS: 'createPet=5,listPets=1' }).rateLimitCosts).toEqual({ createPet: 5, listPets: 1 });
    expect(() => loadConfig({ RATE_LIMIT_COSTS: 'createPet:5' })).toThrow('RATE_LIMIT_COSTS');
    expect(() => loadConfig({ RATE_LIMIT_COSTS: 'createPet=0' })).toThrow('a cost is from 1 to 1000');
    expect(() => loadConfig({ RATE_LIMIT_COSTS: 'createPet=1001' })).toThrow('a cost is from 1 to 1000');
    expect(() => loadConfig({ RATE_LIMIT_COSTS: 'createPet=2,createPet=3' })).toThrow('createPet is named twice');
  });

  it('naming an operation the API does not serve stops the start, naming the ones it does', async () => {
    await expect(buildTestApp({ RATE_LIMIT_COSTS: 'createPets=5' })).rejects.toThrow(
      /Invalid RATE_LIMIT_COSTS: no operation createPets here; the operations are .*createPet/,
    );
  });

  it('a free operation (the quota lookup, the usage read) cannot be priced: it spends nothing, with a limit of its own', async () => {
    for (const free of ['getRateLimit', 'getUsage']) {
      await expect(buildTestApp({ RATE_LIMIT_COSTS: `${free}=5` })).rejects.toThrow(
        `Invalid RATE_LIMIT_COSTS: no operation ${free} here; the operations are listPets, createPet, getPet`,
      );
    }
  });

  it("a cost above a plan's minute stops the start: the plan's keys could never call the operation", async () => {
    await expect(buildTestApp({ RATE_LIMIT_COSTS: 'listPets=2,createPet=61' })).rejects.toThrow(
      "Invalid RATE_LIMIT_COSTS: createPet costs 61, more than the free plan's 60 a minute; its keys could never call it",
    );
  });
});

describe('a store, spending a cost', () => {
  it('spends it in both windows, refuses it when less remains, and refunds it whole', async () => {
    const store = new MemoryStore({ threshold: 30, durationMs: MINUTE });
    const limits = minuteAndDay(12, 100);
    const used = (decision: Decision) => decision.windows.map((window) => window.used);
    expect(used(await store.consume('key:1', limits, T0, 5, true))).toEqual([5, 5]);
    expect(used(await store.consume('key:1', limits, T0, 5, true))).toEqual([10, 10]);
    const refused = await store.consume('key:1', limits, T0, 5, true);
    expect(refused.outcome).toBe('limited');
    expect(used(refused)).toEqual([10, 10]);
    expect((await store.check('key:1', limits, T0, 2)).outcome).toBe('allowed');
    expect((await store.check('key:1', limits, T0, 3)).outcome).toBe('limited');
    const read = await store.consume('key:1', limits, T0, 1, true);
    expect(read.outcome).toBe('allowed');
    expect(used(read)).toEqual([11, 11]);
    await store.refund('key:1', read, 5);
    expect(used((await store.inspect('key:1', limits, T0)).decision)).toEqual([6, 6]);
    await store.close();
  });
});

describe.skipIf(!REDIS_URL)('the Redis store, spending a cost', () => {
  it('gives every window it opens an expiry, whatever the cost of the request that opened it', async () => {
    const prefix = redisStoreEnv().REDIS_KEY_PREFIX;
    const store = new RedisStore(new Redis(REDIS_URL!, { lazyConnect: true }), { threshold: 30, durationMs: MINUTE }, prefix, () => T0);
    const redis = new Redis(REDIS_URL!);
    try {
      await store.connect(5_000);
      const limits = minuteAndDay(6, 100);
      expect((await store.consume('key:1', limits, T0, 5, true)).outcome).toBe('allowed');
      expect((await store.consume('key:1', limits, T0, 5, true)).outcome).toBe('limited');
      // The minute's count, the day's and the minute's refusals: none may stay in Redis for good.
      const written: string[] = [];
      for await (const batch of redis.scanStream({ match: `${prefix}*` })) written.push(...(batch as string[]));
      const expiries = await Promise.all(written.sort().map(async (key) => [key.slice(prefix.length), await redis.pttl(key)] as const));
      expect(expiries).toEqual([
        [`rl:{key:1}:d:${Math.floor(T0 / DAY) * DAY}`, expect.toSatisfy((ttl: number) => ttl > DAY && ttl <= 2 * DAY)],
        [`rl:{key:1}:m:${T0}`, expect.toSatisfy((ttl: number) => ttl > MINUTE && ttl <= 2 * MINUTE)],
        [`rl:{key:1}:r:${T0}`, expect.toSatisfy((ttl: number) => ttl > MINUTE && ttl <= 2 * MINUTE)],
      ]);
    } finally {
      redis.disconnect();
      await store.close();
      await deleteKeys(REDIS_URL!, prefix);
    }
  });
});

describe.each(RATE_LIMIT_STORES)('costs per operation with the $name store', (store) => {
  const test = describeAppTest({ clock: T0, envAtBuild: () => ({ ...store.env(), RATE_LIMIT_COSTS: 'createPet=5' }) });

  describe.skipIf(store.usesRedis && !REDIS_URL)('', () => {
    test('a create costs 5 of each window, a list 1: the headers count units, and a create is refused with fewer than 5 left', async ({
      t,
      clock,
    }) => {
      const limits = minuteAndDay(12, 100);
      const { headers } = await keyInFreshWindows(t.app, clock, { plan: 'enterprise', limits }, 10 * 60 * MINUTE);
      const create = () => t.app.inject({ method: 'POST', url: '/v1/pets', payload: { name: 'Rex', categoryId: 1 }, headers });

      const first = await create();
      expect(first.statusCode).toBe(201);
      expect(first.headers['x-ratelimit-remaining']).toBe('7');
      expect(first.headers.ratelimit).toMatch(/^"minute";r=7;t=\d+, "day";r=95;t=\d+$/);
      expect((await create()).headers['x-ratelimit-remaining']).toBe('2');

      const refused = await create();
      expect(refused.statusCode).toBe(429);
      expect(refused.json()).toMatchObject({ code: 'rate_limited', status: 429 });
      expect(refused.json().message).toContain('this operation costs 5 and 2 remain');
      expect(refused.headers['x-ratelimit-remaining']).toBe('2');
      expect(refused.headers['retry-after']).toBe('60');

      // Reads still go through with what is left, a unit each.
      const list = await t.app.inject({ url: '/v1/pets?limit=1', headers });
      expect(list.statusCode).toBe(200);
      expect(list.headers['x-ratelimit-remaining']).toBe('1');
      expect(list.headers.ratelimit).toMatch(/^"minute";r=1;t=\d+, "day";r=89;t=\d+$/);
    });

    test('a key whose limits were stored below a cost: 403 cost_exceeds_limit without Retry-After, spending nothing, never banned', async ({
      t,
      clock,
    }) => {
      // Stored as a key made before the key rules checked its limits against the costs.
      const limits = minuteAndDay(4, 100);
      const { headers } = await keyInFreshWindows(t.app, clock, { plan: 'enterprise', limits }, 10 * 60 * MINUTE);
      const create = () => t.app.inject({ method: 'POST', url: '/v1/pets', payload: { name: 'Rex', categoryId: 1 }, headers });

      for (let attempt = 0; attempt < 35; attempt++) {
        const refused = await create();
        expect(refused.statusCode).toBe(403);
        expect(refused.json()).toEqual({
          code: 'cost_exceeds_limit',
          message:
            "This operation costs 5 units, more than this API key's limit of 4 per minute: it is never admitted; ask for higher limits",
          status: 403,
        });
        expect(refused.headers['retry-after']).toBeUndefined();
        expect(refused.headers['x-ratelimit-remaining']).toBe('4');
      }
      // Nothing spent and no ban (35 refusals are past the ban threshold of 30): reads go on.
      const list = await t.app.inject({ url: '/v1/pets?limit=1', headers });
      expect(list.statusCode).toBe(200);
      expect(list.headers['x-ratelimit-remaining']).toBe('3');

      // The document says so, on the priced operation only.
      const { paths } = (await t.app.inject({ url: '/v1/openapi.json' })).json();
      expect(paths['/pets'].post.responses['403'].description).toContain(
        'costs 5 units, more than a window of the API key holds (`cost_exceeds_limit`)',
      );
      expect(paths['/pets'].get.responses['403'].description).not.toContain('cost_exceeds_limit');
    });
  });
});

describe.each(RATE_LIMIT_STORES)('a priced read revalidated with the $name store', (store) => {
  const test = describeAppTest({ clock: T0, envAtBuild: () => ({ ...store.env(), RATE_LIMIT_COSTS: 'listPets=3' }) });

  describe.skipIf(store.usesRedis && !REDIS_URL)('', () => {
    test('its 304 gives back the whole cost it spent: the store counts the 200 alone', async ({ t, clock }) => {
      const limits = minuteAndDay(30, 100);
      const { headers, quotaId } = await keyInFreshWindows(t.app, clock, { plan: 'enterprise', limits }, 10 * 60 * MINUTE);
      const read = await t.app.inject({ url: '/v1/pets?limit=1', headers });
      expect(read.statusCode).toBe(200);
      expect(read.headers['x-ratelimit-remaining']).toBe('27');

      // Its tag is not yet known current, so the read is counted, answered 304 by its handler, then taken back.
      const revalidated = await t.app.inject({ url: '/v1/pets?limit=1', headers: { ...headers, 'if-none-match': read.headers.etag } });
      expect(revalidated.statusCode).toBe(304);
      expect(revalidated.headers['x-ratelimit-remaining']).toBe('27');
      const { decision } = await t.app.rateLimit.usage({ quotaId, customerId: null }, limits, clock.now());
      expect(decision.windows.map((window) => window.used)).toEqual([3, 3]);
    });
  });
});
