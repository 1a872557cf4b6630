import { describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { Redis } from 'ioredis';
import { deleteKeys } from '../../harness/redis.js';
import { createCustomerRules } from '../../src/customers/rules.js';
import { minuteAndDay } from '../../src/plans/limits.js';
import { MemoryStore } from '../../src/rate-limit/stores/memory-store.js';
import { RedisStore } from '../../src/rate-limit/stores/redis-store.js';
import { MINUTE_MS } from '../../src/platform/time.js';
import { CREDITS_TTL_MS, type CreditClaim, type RateLimitStore } from '../../src/rate-limit/stores/store.js';
import { KEYS_COMMAND } from '../support/admin.js';
import { balanceRecord, insertBalance } from '../support/credit-balances.js';
import { eventually } from '../support/eventually.js';
import { describeAppTest } from '../support/fixtures.js';
import { bearer, waitForKeyOnApp } from '../support/keys.js';
import { REDIS_URL, redisStoreEnv } from '../support/redis.js';
import { testClock, T0 } from '../support/time.js';

// Issue 54: what the stores keep of balances of credits. A claim of an older version than the
// store's (an instance not yet told of a set) never serves past the new balance (defect: the
// CREDITS script moving the balance back); a balance gone leaves nothing behind, and one unused
// expires (finding 6).

const LIMITS = minuteAndDay(100_000, 1_000_000);
const BAN = { threshold: 30, durationMs: 60_000 };

/** A claim of balance 1 of `key:1`, in the version and with the base an instance's identity holds, seeded from an empty record. */
const claimOf = (version: number, base: number): CreditClaim => ({ subject: 'key:1', id: 1, version, base, seed: { spent: 0, version } });

/** Consumes one unit with the claim until the store refuses it; the units served. */
async function spendAll(store: RateLimitStore, claim: CreditClaim, at: number, most = 20) {
  let served = 0;
  while (served < most && (await store.consume('key:1', LIMITS, at, 1, true, [claim])).outcome === 'allowed') served++;
  return served;
}

describe.skipIf(!REDIS_URL)('a balance in Redis claimed by an instance not yet told of its set', () => {
  it('is decided on the new version: no more served than the new balance, however large the old one (issue 54)', async () => {
    const { REDIS_KEY_PREFIX: prefix } = redisStoreEnv();
    const clock = testClock(T0);
    const [told, late] = [0, 1].map(() => new RedisStore(new Redis(REDIS_URL!, { lazyConnect: true }), BAN, prefix, clock.now));
    try {
      for (const store of [told!, late!]) await store.connect(5_000);
      // Version 1 of 1,000 units, 3 spent; then a set to 4 units (version 2), which only `told` has heard of.
      for (let i = 0; i < 3; i++) await told!.consume('key:1', LIMITS, clock.now(), 1, true, [claimOf(1, 1_000)]);
      expect(await told!.consume('key:1', LIMITS, clock.now(), 1, true, [claimOf(2, 4)])).toMatchObject({
        outcome: 'allowed',
        credits: [{ remaining: 3, version: 2 }],
      });
      // The late instance, still at version 1 of 1,000, spends what remains of version 2: 3 units, not 997.
      expect(await late!.consume('key:1', LIMITS, clock.now(), 1, true, [claimOf(1, 1_000)])).toMatchObject({
        outcome: 'allowed',
        credits: [{ remaining: 2, version: 2 }],
      });
      const served = (await spendAll(late!, claimOf(1, 1_000), clock.now())) + (await spendAll(told!, claimOf(2, 4), clock.now()));
      expect(served).toBe(2);
      expect(await late!.consume('key:1', LIMITS, clock.now(), 1, true, [claimOf(1, 1_000)])).toMatchObject({
        outcome: 'credits_exhausted',
      });
    } finally {
      for (const store of [told!, late!]) await store.close();
      await deleteKeys(REDIS_URL!, prefix);
    }
  });
});

describe.skipIf(!REDIS_URL)('a refund of a balance in Redis dropped and seeded again at 0 spent meanwhile', () => {
  it('gives back nothing and fails nothing (Lua sent -0 to HINCRBY: ERR value is not an integer)', async () => {
    const { REDIS_KEY_PREFIX: prefix } = redisStoreEnv();
    const store = new RedisStore(new Redis(REDIS_URL!, { lazyConnect: true }), BAN, prefix);
    try {
      await store.connect(5_000);
      const decision = await store.consume('key:1', LIMITS, T0, 1, true, [claimOf(1, 10)]);
      expect(decision).toMatchObject({ outcome: 'allowed', credits: [{ remaining: 9, version: 1 }] });
      await store.forgetBalance('key:1', 1);
      expect(await store.check('key:1', LIMITS, T0, 0, [claimOf(1, 10)])).toMatchObject({ credits: [{ remaining: 10, version: 1 }] });
      await store.refund('key:1', decision, 1, [claimOf(1, 10)]);
      expect(await store.check('key:1', LIMITS, T0, 0, [claimOf(1, 10)])).toMatchObject({ credits: [{ remaining: 10, version: 1 }] });
    } finally {
      await store.close();
      await deleteKeys(REDIS_URL!, prefix);
    }
  });
});

describe("the memory store's balance claimed with a key read before its set", () => {
  it('is decided on the new version: no more served than the new balance (issue 54)', async () => {
    const store = new MemoryStore(BAN);
    try {
      expect(await spendAll(store, claimOf(1, 1_000), T0, 3)).toBe(3);
      expect(await spendAll(store, claimOf(2, 4), T0, 1)).toBe(1);
      expect((await spendAll(store, claimOf(1, 1_000), T0)) + (await spendAll(store, claimOf(2, 4), T0))).toBe(3);
    } finally {
      await store.close();
    }
  });
});

describe("the memory store's balances", () => {
  it('are dropped when gone, and when neither seeded nor spent from for CREDITS_TTL_MS (a sweep a minute)', async () => {
    let now = T0;
    const store = new MemoryStore(BAN, { now: () => now });
    try {
      const claims = [1, 2, 3].map((id) => ({ ...claimOf(1, 100), id }));
      for (const claim of claims) expect(await spendAll(store, claim, now, 1)).toBe(1);
      expect(store.creditBalances).toBe(3);
      await store.forgetBalance('key:1', 1);
      expect(store.creditBalances).toBe(2);
      // Balance 2 spent from every hour, balance 3 never again.
      for (let at = MINUTE_MS; at <= CREDITS_TTL_MS + MINUTE_MS; at += MINUTE_MS) {
        now = T0 + at;
        if (at % (60 * MINUTE_MS) === 0) expect(await spendAll(store, claims[1]!, now, 1)).toBe(1);
        store.sweep(now);
      }
      expect(store.creditBalances).toBe(1);
      // Seeded again from its record, balance 3 serves what the record says remains.
      expect(await spendAll(store, { ...claims[2]!, seed: { spent: 99, version: 1 } }, now)).toBe(1);
    } finally {
      await store.close();
    }
  });
});

/** A key of a new customer, known to the app, with a balance of its own quota's and its customer's, each of 100. */
async function keyWithBalances(app: FastifyInstance, n: number) {
  const customer = await createCustomerRules(app.db).create(
    { externalId: `cus_store_${n}_${Date.now()}`, limits: null },
    { actor: KEYS_COMMAND },
  );
  const { key, record } = await app.apiKeysRepository.create({ plan: 'pro', customerId: customer.id });
  const headers = bearer(key);
  await waitForKeyOnApp(app, headers);
  const quota = await insertBalance(app.db, { quotaId: record.quotaId }, 100);
  const shared = await insertBalance(app.db, { customerId: customer.id }, 100);
  expect(await app.keyNotices.catchUp()).toBe(true);
  return { customer, record, headers, quota, shared };
}

describe.skipIf(!REDIS_URL)("balances' hashes in Redis", () => {
  const env = redisStoreEnv();
  const test = describeAppTest({ envAtBuild: () => env });
  const get = (app: FastifyInstance, headers: { authorization: string }) => app.inject({ url: '/v1/pets?limit=1', headers });

  test('are deleted when a balance is removed or replaced or its key revoked, and expire unless used (issue 54, finding 6)', async ({
    t,
  }) => {
    const redis = new Redis(REDIS_URL!);
    const hashes = async () => {
      const found: string[] = [];
      for await (const batch of redis.scanStream({ match: `${env.REDIS_KEY_PREFIX}*:cr:*`, count: 1000 }))
        found.push(...(batch as string[]));
      return found;
    };
    try {
      const keys = [];
      for (let n = 0; n < 4; n++) keys.push(await keyWithBalances(t.app, n));
      for (const { headers } of keys) expect((await get(t.app, headers)).statusCode).toBe(200);
      expect(await hashes()).toHaveLength(8);
      for (const hash of await hashes()) expect(await redis.pttl(hash)).toSatisfy((ttl: number) => ttl > 0 && ttl <= CREDITS_TTL_MS);

      const [removed, replaced, revoked, kept] = keys as [(typeof keys)[0], (typeof keys)[0], (typeof keys)[0], (typeof keys)[0]];
      // Removed: the customer's balance of the first; replaced: the second's quota's, by a new one, then spent from.
      await t.app.db.query('DELETE FROM credit_balances WHERE id = $1', [removed.shared]);
      await t.app.db.query('DELETE FROM credit_balances WHERE id = $1', [replaced.quota]);
      await insertBalance(t.app.db, { quotaId: replaced.record.quotaId }, 50);
      expect(await t.app.keyNotices.catchUp()).toBe(true);
      expect((await get(t.app, replaced.headers)).statusCode).toBe(200);
      // Revoked: the third's key, its quota's last: its quota's balance goes; its customer's stays.
      await t.app.keyRules.revoke(revoked.record.id);
      // The first's quota, the second's customer's and new quota's, the third's customer's, the fourth's two.
      await eventually(async () => (await hashes()).length === 6);

      // A hash gone (as expired) is seeded from the record once it has caught up: what remains is served, no more.
      await eventually(async () => (await balanceRecord(t.app.db, kept.quota)).spent === 1);
      await redis.del(...(await hashes()).filter((hash) => hash.endsWith(`:cr:${kept.quota}`)));
      await t.app.db.query('UPDATE credit_balances SET base = 3 WHERE id = $1', [kept.quota]);
      expect(await t.app.keyNotices.catchUp()).toBe(true);
      const statuses = [];
      for (let i = 0; i < 3; i++) statuses.push((await get(t.app, kept.headers)).statusCode);
      expect(statuses).toEqual([200, 200, 429]);
    } finally {
      redis.disconnect();
      await deleteKeys(REDIS_URL!, env.REDIS_KEY_PREFIX);
    }
  });
});
