import { describe, expect } from 'vitest';
import { deleteKeys } from '../../harness/redis.js';
import { freePort } from '../../harness/free-port.js';
import { createLedgerRepository } from '../../src/credits/ledger-repository.js';
import type { Database } from '../../src/platform/db/database.js';
import { minuteAndDay } from '../../src/plans/limits.js';
import { MemoryStore } from '../../src/rate-limit/stores/memory-store.js';
import { OutageCredits } from '../../src/rate-limit/stores/outage-credits.js';
import type { CreditClaim } from '../../src/rate-limit/stores/store.js';
import { balanceRecord, insertCustomerBalance } from '../support/credit-balances.js';
import { databaseTest } from '../support/fixtures.js';
import { REDIS_URL, redisStoreAt, redisStoreEnv } from '../support/redis.js';
import { T0 } from '../support/time.js';

// Issue 55, item 5: while Redis is unreachable, the fallback decides balances of credits in their
// record in PostgreSQL (OutageCredits directly, on a real database) and the windows in memory.

const LIMITS = minuteAndDay(100, 1_000);
const BAN = { threshold: 30, durationMs: 60_000 };

/** `outage`: the fallback's credits on this instance's memory (closed after the test) and the file's database's record. */
const test = databaseTest().extend('outage', ({ database: { db } }, { onCleanup }) => {
  const memory = new MemoryStore(BAN, { now: () => T0 });
  onCleanup(() => memory.close());
  return { db, memory, credits: new OutageCredits(memory, createLedgerRepository(db)) };
});

/** A claim of the balance as a key's identity holds it (version 1). */
const claimOf = (id: number, base: number): CreditClaim => ({ subject: `customer:${id}`, id, version: 1, base });

const spentOf = async (db: Database, id: number) => (await balanceRecord(db, id)).spent;

describe('the fallback deciding balances of credits in their record', () => {
  test('spends in the record while the balance lasts, then refuses for credits with nothing counted in the windows', async ({
    outage: { db, credits },
  }) => {
    const id = await insertCustomerBalance(db, 2);
    const claims = [claimOf(id, 2)];
    const consume = () => credits.consume('key:1', LIMITS, T0, 1, true, claims);
    expect(await consume()).toMatchObject({
      outcome: 'allowed',
      windows: [
        { name: 'minute', used: 1 },
        { name: 'day', used: 1 },
      ],
      credits: [{ remaining: 1, version: 1, recorded: true }],
    });
    expect(await consume()).toMatchObject({ outcome: 'allowed', credits: [{ remaining: 0, version: 1, recorded: true }] });
    expect(await spentOf(db, id)).toBe(2);
    // Refused for credits: what memory counted of it taken back, so its minute stays at the 2 served.
    expect(await consume()).toMatchObject({
      outcome: 'credits_exhausted',
      windows: [{ used: 2 }, { used: 2 }],
      credits: [{ remaining: 0 }],
    });
    expect(await spentOf(db, id)).toBe(2);
    expect(await credits.check('key:1', LIMITS, T0, 1, claims)).toMatchObject({
      outcome: 'credits_exhausted',
      credits: [{ remaining: 0, version: 1 }],
    });
  });

  test("a key's two balances are spent all or none: one short refuses the request, the other keeps its units", async ({
    outage: { db, credits },
  }) => {
    const [own, shared] = [await insertCustomerBalance(db, 1), await insertCustomerBalance(db, 10)];
    const claims = [claimOf(own, 1), claimOf(shared, 10)];
    expect((await credits.consume('key:1', LIMITS, T0, 1, true, claims)).outcome).toBe('allowed');
    expect(await credits.consume('key:1', LIMITS, T0, 1, true, claims)).toMatchObject({
      outcome: 'credits_exhausted',
      credits: [{ remaining: 0 }, { remaining: 9 }],
    });
    expect([await spentOf(db, own), await spentOf(db, shared)]).toEqual([1, 1]);
  });

  test('gives back in the record what a free 304 spent there, in the version it was spent in; nothing of what the ledger spent', async ({
    outage: { db, credits },
  }) => {
    const id = await insertCustomerBalance(db, 5);
    const claims = [claimOf(id, 5)];
    const decisions = [];
    for (let i = 0; i < 3; i++) decisions.push(await credits.consume('key:1', LIMITS, T0, 1, true, claims));
    expect(await spentOf(db, id)).toBe(3);
    await credits.refund(decisions[0]!, 1, claims, true);
    expect(await spentOf(db, id)).toBe(2);
    // Spent on Redis (not `recorded`): the ledger gives it back, not the fallback.
    await credits.refund({ ...decisions[1]!, credits: [{ remaining: 3, version: 1 }] }, 1, claims, true);
    expect(await spentOf(db, id)).toBe(2);
    // A set meanwhile (version 2): a refund of version 1 takes nothing from the new balance's spending.
    await db.query('UPDATE credit_balances SET spent = 1, version = 2 WHERE id = $1', [id]);
    await credits.refund(decisions[2]!, 1, claims, true);
    expect(await balanceRecord(db, id)).toMatchObject({ spent: 1, version: 2 });
  });

  test('the record unreachable too: the request fails, having counted nothing in the windows', async ({
    outage: { db, memory, credits },
  }) => {
    const id = await insertCustomerBalance(db, 5);
    await db.query('ALTER TABLE credit_balances RENAME TO credit_balances_hidden');
    try {
      await expect(credits.consume('key:1', LIMITS, T0, 1, true, [claimOf(id, 5)])).rejects.toThrow();
    } finally {
      await db.query('ALTER TABLE credit_balances_hidden RENAME TO credit_balances');
    }
    expect(await memory.check('key:1', LIMITS, T0, 1)).toMatchObject({ windows: [{ used: 0 }, { used: 0 }] });
  });
});

describe.skipIf(!REDIS_URL)("the balances touched while Redis was unreachable, dropped from Redis's copy once it is back", () => {
  test('forgetIn drops each balance spent from or given back to meanwhile, and keeps them should the drop fail', async ({
    outage: { db, credits },
    onTestFinished,
  }) => {
    const { REDIS_KEY_PREFIX: prefix } = redisStoreEnv();
    const redis = redisStoreAt(REDIS_URL!, prefix);
    const unreachable = redisStoreAt(`redis://127.0.0.1:${await freePort()}`, prefix);
    onTestFinished(async () => {
      await Promise.all([redis.close(), unreachable.close()]);
      await deleteKeys(REDIS_URL!, prefix);
    });
    await redis.connect(5_000);
    const [spent, untouched] = [await insertCustomerBalance(db, 10), await insertCustomerBalance(db, 10)];
    // Both held by Redis before the outage, one unit spent of each there.
    for (const id of [spent, untouched])
      await redis.consume('key:1', LIMITS, Date.now(), 1, true, [{ ...claimOf(id, 10), seed: { spent: 0, version: 1 } }]);
    const held = () => redis.live.read([spent, untouched].map((id) => ({ subject: `customer:${id}`, id })));
    expect((await held()).map((balance) => balance?.spent)).toEqual([1, 1]);

    expect((await credits.consume('key:1', LIMITS, T0, 1, true, [claimOf(spent, 10)])).outcome).toBe('allowed');
    await expect(credits.forgetIn(unreachable)).rejects.toThrow();
    expect((await held()).map((balance) => balance?.spent)).toEqual([1, 1]);
    // Kept after the failure: dropped at the next try, the balance never touched left as it was.
    await credits.forgetIn(redis);
    expect((await held()).map((balance) => balance?.spent)).toEqual([undefined, 1]);
    // Its next request seeds it from the record, which holds the unit spent during the outage.
    const seeded = await redis.consume('key:1', LIMITS, Date.now(), 1, true, [
      { ...claimOf(spent, 10), seed: { spent: await spentOf(db, spent), version: 1 } },
    ]);
    expect(seeded.credits).toEqual([{ remaining: 8, version: 1 }]);
    // Forgotten once: a later forgetIn leaves Redis's copy alone.
    await credits.forgetIn(redis);
    expect((await held()).map((balance) => balance?.spent)).toEqual([2, 1]);
  });
});
