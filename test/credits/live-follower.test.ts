import { describe, expect } from 'vitest';
import { deleteKeys } from '../../harness/redis.js';
import { freePort } from '../../harness/free-port.js';
import { createLedgerRepository } from '../../src/credits/ledger-repository.js';
import { LiveFollower } from '../../src/credits/live-follower.js';
import type { Database } from '../../src/platform/db/database.js';
import { minuteAndDay } from '../../src/plans/limits.js';
import type { RedisStore } from '../../src/rate-limit/stores/redis-store.js';
import type { CreditClaim } from '../../src/rate-limit/stores/store.js';
import { balanceRecord, insertCustomerBalance } from '../support/credit-balances.js';
import { eventually } from '../support/eventually.js';
import { databaseTest } from '../support/fixtures.js';
import { capturingLogger } from '../support/logs.js';
import { REDIS_URL, redisStoreAt, redisStoreEnv } from '../support/redis.js';

// Issue 55, item 5: the record of credits on Redis (shared by every instance) follows the live
// balance, LiveFollower directly, on a real RedisStore (a prefix of the test's own) and a real database.

const LIMITS = minuteAndDay(100_000, 1_000_000);
const BASE = 100;

type OnFinished = (cleanup: () => Promise<void>) => void;

/** Each test's keys under a prefix of its own, deleted after it. */
// eslint-disable-next-line no-empty-pattern -- vitest reads a fixture's dependencies from this pattern
const test = databaseTest().extend('prefix', async ({}, { onCleanup }) => {
  const { REDIS_KEY_PREFIX: prefix } = redisStoreEnv();
  onCleanup(() => deleteKeys(REDIS_URL!, prefix));
  return prefix;
});

/** A store on the suite's Redis under the test's prefix, as another instance would open it; closed after the test. */
async function openStore(prefix: string, onTestFinished: OnFinished) {
  const store = redisStoreAt(REDIS_URL!, prefix);
  onTestFinished(() => store.close());
  await store.connect(5_000);
  return store;
}

/** A follower of the store's balances writing to the database's record, its warnings captured; closed after the test. */
function follow(store: RedisStore, db: Database, onTestFinished: OnFinished) {
  const { log, warnings } = capturingLogger();
  const follower = new LiveFollower(store.live, createLedgerRepository(db), log);
  onTestFinished(() => follower.close());
  return { follower, warnings };
}

/** A claim of a balance of 100 in version 1, seeded from an empty record. */
const claimOf = (id: number): CreditClaim => ({ subject: `customer:${id}`, id, version: 1, base: BASE, seed: { spent: 0, version: 1 } });

/**
 * Spends `units` of the balance on the store, one request each; with a follower, tells it each as
 * the limiter does (the live spent the decision left). The decision of the last.
 */
async function spendLive(store: RedisStore, id: number, units: number, follower?: LiveFollower) {
  const claim = claimOf(id);
  const decisions = [];
  for (let i = 0; i < units; i++) {
    const decision = await store.consume(claim.subject, LIMITS, Date.now(), 1, true, [claim]);
    expect(decision.outcome).toBe('allowed');
    follower?.spend(claim.subject, id, 1, 1, BASE - decision.credits![0]!.remaining!);
    decisions.push(decision);
  }
  return decisions.at(-1)!;
}

const spentOf = async (db: Database, id: number) => (await balanceRecord(db, id)).spent;

/** The follower's write; the balance's spent in the record then. */
async function writtenSpent(follower: LiveFollower, db: Database, id: number) {
  await follower.write();
  return spentOf(db, id);
}

/** A balance this instance spent 3 of on the store, told its follower, and wrote: the record at 3. */
async function threeWritten(prefix: string, db: Database, onTestFinished: OnFinished) {
  const store = await openStore(prefix, onTestFinished);
  const { follower } = follow(store, db, onTestFinished);
  const id = await insertCustomerBalance(db, BASE);
  const decision = await spendLive(store, id, 3, follower);
  await follower.write();
  expect(await spentOf(db, id)).toBe(3);
  return { store, follower, id, decision };
}

describe.skipIf(!REDIS_URL)('the record following the live balance on Redis', () => {
  test('writes the live spent, what other instances spent and never told this one included', async ({
    database: { db },
    prefix,
    onTestFinished,
  }) => {
    const { follower, id } = await threeWritten(prefix, db, onTestFinished);
    const other = await openStore(prefix, onTestFinished);
    // Another instance spends 4 (and is killed before its own write): this one's next write reads them.
    await spendLive(other, id, 4);
    expect(await writtenSpent(follower, db, id)).toBe(7);
  });

  test('never lowers the record below it (GREATEST): spending the record has beyond Redis stays', async ({
    database: { db },
    prefix,
    onTestFinished,
  }) => {
    const { store, follower, id } = await threeWritten(prefix, db, onTestFinished);
    // Spent in the record itself meanwhile (another instance's fallback while Redis was unreachable to it).
    await db.query('UPDATE credit_balances SET spent = spent + 5 WHERE id = $1', [id]);
    await spendLive(store, id, 1, follower);
    expect(await writtenSpent(follower, db, id)).toBe(8);
  });

  test('a refund (a free 304) after its spending was written lowers the record by what was given back', async ({
    database: { db },
    prefix,
    onTestFinished,
  }) => {
    const { store, follower, id, decision } = await threeWritten(prefix, db, onTestFinished);
    // Given back on Redis and told the ledger, as the limiter does: no live spent with it.
    await store.refund(claimOf(id).subject, decision, 1, [claimOf(id)]);
    follower.spend(claimOf(id).subject, id, 1, -1);
    expect(await writtenSpent(follower, db, id)).toBe(2);
    // Given back once: the next write does not lower it again.
    expect(await writtenSpent(follower, db, id)).toBe(2);
  });

  test("a new follower's start reads every balance Redis holds under its prefix, spent from or not", async ({
    database: { db },
    prefix,
    onTestFinished,
  }) => {
    const store = await openStore(prefix, onTestFinished);
    const [a, b] = [await insertCustomerBalance(db, BASE), await insertCustomerBalance(db, BASE)];
    // Spent by an instance killed before it wrote: the record knows nothing of it.
    await spendLive(store, a, 2);
    await spendLive(store, b, 3);
    expect([await spentOf(db, a), await spentOf(db, b)]).toEqual([0, 0]);
    follow(await openStore(prefix, onTestFinished), db, onTestFinished);
    await eventually(async () => (await spentOf(db, a)) === 2 && (await spentOf(db, b)) === 3);
  });

  test('seeds a store that lost a balance with the record or what this instance knows of it, whichever is more', async ({
    database: { db },
    prefix,
    onTestFinished,
  }) => {
    const store = await openStore(prefix, onTestFinished);
    const { follower } = follow(store, db, onTestFinished);
    const id = await insertCustomerBalance(db, BASE);
    await spendLive(store, id, 4, follower);
    expect(follower.seed(id, { spent: 1, version: 1 })).toEqual({ spent: 4, version: 1 });
    expect(follower.seed(id, { spent: 9, version: 1 })).toEqual({ spent: 9, version: 1 });
    // A record of a newer version (a set): this instance's spending of the old one is not its.
    expect(follower.seed(id, { spent: 0, version: 2 })).toEqual({ spent: 0, version: 2 });
  });
});

describe('the record following the live balance while Redis is unreachable', () => {
  test('with Redis unreachable, writes what this instance knows: the live spent it was last told and what it spent since', async ({
    database: { db },
    onTestFinished,
  }) => {
    // Nothing listens there: every read of the store fails at once.
    const unreachable = redisStoreAt(`redis://127.0.0.1:${await freePort()}`);
    onTestFinished(() => unreachable.close());
    const { follower, warnings } = follow(unreachable, db, onTestFinished);
    const [told, untold] = [await insertCustomerBalance(db, BASE), await insertCustomerBalance(db, BASE)];
    follower.spend(`customer:${told}`, told, 1, 1, 5);
    follower.spend(`customer:${told}`, told, 1, 1);
    follower.spend(`customer:${told}`, told, 1, 1);
    // Never told a live spent: what others spent of it is unknown, so nothing is written of it.
    follower.spend(`customer:${untold}`, untold, 1, 1);
    await follower.write();
    expect([await spentOf(db, told), await spentOf(db, untold)]).toEqual([7, 0]);
    await eventually(async () => warnings().includes('credits: following every balance the store holds failed; tried again'));
  });
});
