import { describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import type { Limits, RateWindow } from '../../src/plans/limits.js';
import { counterKey, RedisStore } from '../../src/rate-limit/stores/redis-store.js';
import { lesserWindows, NO_SLOT, type Decision } from '../../src/rate-limit/stores/store.js';
import { commandCalls, deleteKeys } from '../../harness/redis.js';
import { REDIS_URL, redisStoreEnv, startRedis } from '../support/redis.js';
import { DAY, MINUTE, T0 } from '../support/time.js';

// The Redis store deciding lists of named windows (issue 56): every window of a request in one
// script call, counted in all of them or in none; a sliding window at a boundary; windows of one
// length sharing their counter; refunds from every window. Times are injected: nothing sleeps.

const windowOf = (name: string, limit: number, windowSeconds: number, algorithm: RateWindow['algorithm'] = 'fixed'): RateWindow => ({
  name,
  limit,
  windowSeconds,
  algorithm,
});
/** A second, a minute and a day: the three windows of the bench row. */
const THREE: Limits = [windowOf('second', 3, 1), windowOf('minute', 5, 60), windowOf('day', 100, 86_400)];
const BAN = { threshold: 30, durationMs: MINUTE };
const DAY0 = T0 - (T0 % DAY);

/** A store on the Redis at `url` under `prefix`, connected, and a plain client beside it; both closed and the keys dropped after `body`. */
async function withStore(url: string, prefix: string, body: (store: RedisStore, redis: Redis) => Promise<void>) {
  const store = new RedisStore(new Redis(url, { lazyConnect: true }), BAN, prefix);
  const redis = new Redis(url);
  try {
    await store.connect(5_000);
    await body(store, redis);
  } finally {
    redis.disconnect();
    await store.close();
    await deleteKeys(url, prefix);
  }
}

const consume = (store: RedisStore, limits: Limits, now: number, subject = 'key:1') => store.consume(subject, limits, now, 1, true);
const used = (decision: Decision) => decision.windows.map((window) => window.used);
/** The value of each counter of `key:1` under `prefix`, by its length and the start of its window. */
const countersOf =
  (redis: Redis, prefix: string, subject = 'key:1') =>
  (windowSeconds: number, start: number) =>
    redis.get(counterKey(`${prefix}rl:{${subject}}`, windowSeconds, start)).then(Number);

describe.skipIf(!REDIS_URL)('the Redis store, several windows in one call', () => {
  it('a second, a minute and a day: one script call per request (one MGET, one INCRBY per window), one MGET per check', async () => {
    const own = await startRedis();
    try {
      await withStore(own.url, 'calls:', async (store, redis) => {
        // The first call loads the script (EVAL after EVALSHA's NOSCRIPT): left out of the counts.
        await consume(store, THREE, T0, 'key:warm');
        await redis.config('RESETSTAT');
        for (let i = 1; i <= 3; i++) expect(used(await consume(store, THREE, T0))).toEqual([i, i, i]);
        const calls = await commandCalls(own.url);
        expect({ evalsha: calls.evalsha, eval: calls.eval ?? 0, mget: calls.mget, incrby: calls.incrby }).toEqual({
          evalsha: 3,
          eval: 0,
          mget: 3,
          incrby: 9,
        });
        await redis.config('RESETSTAT');
        expect(used(await store.check('key:1', THREE, T0, 1))).toEqual([3, 3, 3]);
        const checked = await commandCalls(own.url);
        expect({ evalsha: checked.evalsha ?? 0, mget: checked.mget }).toEqual({ evalsha: 0, mget: 1 });
        // Each counter under its length's name (a minute's and a day's as before issue 56), expiring after two of its windows.
        const counters = ['w1', 'm', 'd'].map((infix, i) => `calls:rl:{key:1}:${infix}:${[T0, T0, DAY0][i]}`);
        const ttls = await Promise.all(counters.map((key) => redis.pttl(key)));
        expect(ttls.map((ttl, i) => ttl > [1_000, MINUTE, DAY][i]! && ttl <= 2 * [1_000, MINUTE, DAY][i]!)).toEqual([true, true, true]);
      });
    } finally {
      await own.stop();
    }
  });

  it('serves a request only if every window has room, and counts it in all of them or in none', async () => {
    const prefix = redisStoreEnv().REDIS_KEY_PREFIX;
    await withStore(REDIS_URL!, prefix, async (store, redis) => {
      const counter = countersOf(redis, prefix);
      for (let i = 0; i < 3; i++) expect((await consume(store, THREE, T0)).outcome).toBe('allowed');
      // The second is full: refused, and neither the minute nor the day counts it.
      const refused = await consume(store, THREE, T0 + 500);
      expect(refused).toMatchObject({ outcome: 'limited', refusals: 1 });
      expect(used(refused)).toEqual([3, 3, 3]);
      expect(refused.windows[0]).toMatchObject({ name: 'second', resetAt: T0 + 1_000 });
      // The next second has room: the minute's last two go.
      expect(used(await consume(store, THREE, T0 + 1_000))).toEqual([1, 4, 4]);
      expect(used(await consume(store, THREE, T0 + 2_000))).toEqual([1, 5, 5]);
      // The minute is full: a fresh second refuses too, and counts nothing in it.
      expect(used(await consume(store, THREE, T0 + 3_000))).toEqual([0, 5, 5]);
      expect(await counter(1, T0 + 3_000)).toBe(0);
      expect([await counter(60, T0), await counter(86_400, DAY0)]).toEqual([5, 5]);
    });
  });

  it('a sliding window of 10 s refuses at the start of the next window the burst spent at the end of the previous; a fixed one serves it', async () => {
    const prefix = redisStoreEnv().REDIS_KEY_PREFIX;
    const [sliding, fixed] = [[windowOf('burst', 5, 10, 'sliding')], [windowOf('burst', 5, 10, 'fixed')]];
    await withStore(REDIS_URL!, prefix, async (store) => {
      for (let i = 0; i < 5; i++) {
        expect((await consume(store, sliding, T0 + 9_000 + 100 * i, 'key:sliding')).outcome).toBe('allowed');
        expect((await consume(store, fixed, T0 + 9_000 + 100 * i, 'key:fixed')).outcome).toBe('allowed');
      }
      const boundary = T0 + 10_000;
      expect((await consume(store, fixed, boundary, 'key:fixed')).outcome).toBe('allowed');
      const refused = await consume(store, sliding, boundary, 'key:sliding');
      // All 5 of the previous window still count; the next unit is free once a fifth of it has slid out.
      expect(refused).toMatchObject({ outcome: 'limited', windows: [{ used: 5, start: boundary, resetAt: boundary + 2_000 }] });
      expect((await consume(store, sliding, boundary + 1_999, 'key:sliding')).outcome).toBe('limited');
      expect(await consume(store, sliding, boundary + 2_000, 'key:sliding')).toMatchObject({ outcome: 'allowed', windows: [{ used: 5 }] });
    });
  });

  it('two instances share a sliding 10-second window of 5 exactly: 20 requests at once, 5 served; a check reads the previous window too', async () => {
    const prefix = redisStoreEnv().REDIS_KEY_PREFIX;
    const limits = [windowOf('burst', 5, 10, 'sliding')];
    await withStore(REDIS_URL!, prefix, async (a) => {
      await withStore(REDIS_URL!, prefix, async (b) => {
        const decisions = await Promise.all(Array.from({ length: 20 }, (_, i) => consume(i % 2 ? a : b, limits, T0 + 9_000 + i)));
        expect(decisions.filter(({ outcome }) => outcome === 'allowed')).toHaveLength(5);
        expect(await a.check('key:1', limits, T0 + 10_000, 1)).toMatchObject({ outcome: 'limited', windows: [{ used: 5 }] });
        expect(await b.check('key:1', limits, T0 + 12_000, 1)).toMatchObject({ outcome: 'allowed', windows: [{ used: 4 }] });
      });
    });
  });

  it('counts two windows of the same length once: they share their counter, a fixed one and a sliding one alike', async () => {
    const prefix = redisStoreEnv().REDIS_KEY_PREFIX;
    const limits: Limits = [windowOf('fixed', 10, 60), windowOf('sliding', 3, 60, 'sliding')];
    await withStore(REDIS_URL!, prefix, async (store, redis) => {
      for (let i = 1; i <= 3; i++) expect(used(await consume(store, limits, T0))).toEqual([i, i]);
      expect(await consume(store, limits, T0)).toMatchObject({ outcome: 'limited', windows: [{ used: 3 }, { used: 3 }] });
      expect(await countersOf(redis, prefix)(60, T0)).toBe(3);
    });
  });

  it("takes a refund back from every window, the key's and its customer's, each from the counter it was counted in", async () => {
    const prefix = redisStoreEnv().REDIS_KEY_PREFIX;
    const [subject, customer] = ['{customer:1}key:1', 'customer:1'];
    const shared = { subject: customer, limits: [windowOf('burst', 4, 10, 'sliding'), windowOf('day', 50, 86_400)], slots: 0 };
    const claim = { cost: 2, bans: true, count: true, slot: NO_SLOT };
    const limits: Limits = [windowOf('second', 3, 1), windowOf('minute', 10, 60), windowOf('day', 100, 86_400)];
    await withStore(REDIS_URL!, prefix, async (store, redis) => {
      const own = (seconds: number, start: number) => redis.get(counterKey(`${prefix}rl:{customer:1}key:1`, seconds, start)).then(Number);
      const theirs = countersOf(redis, prefix, customer);
      const first = await store.decideShared(subject, limits, T0, claim, shared);
      expect(first.admission).toMatchObject({ outcome: 'allowed', windows: [{ used: 2 }, { used: 2 }, { used: 2 }] });
      expect(first.customer.windows.map((window) => window.used)).toEqual([2, 2]);
      // The customer's burst has room for 2 more, not 4: refused, nothing counted in the key's windows.
      const second = await store.decideShared(subject, limits, T0 + 1_000, claim, shared);
      expect(second.admission).toMatchObject({ outcome: 'allowed' });
      expect((await store.decideShared(subject, limits, T0 + 2_000, claim, shared)).admission).toMatchObject({
        outcome: 'limited',
        windows: [{ used: 0 }, { used: 4 }, { used: 4 }],
      });
      // As admission keeps it: the key's windows and its customer's together (lesserWindows).
      const bound = {
        ...(second.admission as Decision),
        windows: lesserWindows((second.admission as Decision).windows, second.customer.windows),
      };
      await store.refundShared(subject, customer, bound, 2);
      expect([await own(1, T0 + 1_000), await own(60, T0), await own(86_400, DAY0)]).toEqual([0, 2, 2]);
      expect([await theirs(10, T0), await theirs(86_400, DAY0)]).toEqual([2, 2]);
      await store.refund('key:2', await consume(store, THREE, T0, 'key:2'), 1);
      expect(used(await store.check('key:2', THREE, T0, 1))).toEqual([0, 0, 0]);
    });
  });
});
