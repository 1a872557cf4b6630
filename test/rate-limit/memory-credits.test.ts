import { describe, expect, it } from 'vitest';
import { MemoryCredits } from '../../src/rate-limit/stores/memory-credits.js';
import { MINUTE_MS } from '../../src/platform/time.js';
import { CREDITS_TTL_MS, type CreditClaim } from '../../src/rate-limit/stores/store.js';
import { T0, testClock } from '../support/time.js';

// Issue 55, item 5: the memory store's balances of credits, decided by MemoryCredits directly.

/** A claim of a balance of `key:1` as an identity holds it; `seed`: its record, for a store that holds none of it. */
const claimOf = (id: number, version: number, base: number, seed?: CreditClaim['seed']): CreditClaim => ({
  subject: 'key:1',
  id,
  version,
  base,
  ...(seed && { seed }),
});

/** Assesses the claims at `cost` and spends it when every balance holds it, as the memory store does; the outcome. */
function decide(credits: MemoryCredits, claims: readonly CreditClaim[], cost = 1) {
  const { standings, refusal } = credits.assess(claims, cost);
  return { refusal, standings: refusal ? standings : credits.spend(claims, standings, cost) };
}

describe('MemoryCredits', () => {
  it('answers a balance it holds none of unseeded, keeping nothing; seeded, it counts on from the record', () => {
    const credits = new MemoryCredits();
    expect(credits.assess([claimOf(1, 1, 5)], 1)).toEqual({ refusal: 'unseeded', standings: [{ remaining: null, version: 1 }] });
    expect(credits.size).toBe(0);
    // The record says 2 were spent of 5: 3 remain, the first of which this request spends.
    expect(decide(credits, [claimOf(1, 1, 5, { spent: 2, version: 1 })])).toEqual({
      refusal: undefined,
      standings: [{ remaining: 2, version: 1 }],
    });
    expect(credits.size).toBe(1);
    // Held now: a seed given again (an instance seeding at the same time) does not count the record twice.
    expect(decide(credits, [claimOf(1, 1, 5, { spent: 2, version: 1 })]).standings).toEqual([{ remaining: 1, version: 1 }]);
    expect(decide(credits, [claimOf(1, 1, 5)]).standings).toEqual([{ remaining: 0, version: 1 }]);
    expect(decide(credits, [claimOf(1, 1, 5)]).refusal).toBe('credits_exhausted');
  });

  it("spends from a key's two balances all or nothing: one short of the cost refuses both, neither spent", () => {
    const credits = new MemoryCredits();
    const both = [claimOf(1, 1, 10, { spent: 0, version: 1 }), claimOf(2, 1, 3, { spent: 0, version: 1 })];
    expect(decide(credits, both, 2).standings).toEqual([
      { remaining: 8, version: 1 },
      { remaining: 1, version: 1 },
    ]);
    expect(decide(credits, both, 2)).toEqual({
      refusal: 'credits_exhausted',
      standings: [
        { remaining: 8, version: 1 },
        { remaining: 1, version: 1 },
      ],
    });
    // The refusal spent nothing of the first: a cheaper request is served from both as they stood.
    expect(decide(credits, both, 1).standings).toEqual([
      { remaining: 7, version: 1 },
      { remaining: 0, version: 1 },
    ]);
  });

  it('restarts a balance at 0 in a newer version (a set or refill), and gives a refund back only in the version it was spent in', () => {
    const credits = new MemoryCredits();
    const spentInOne = decide(credits, [claimOf(1, 1, 5, { spent: 4, version: 1 })]);
    expect(spentInOne.standings).toEqual([{ remaining: 0, version: 1 }]);
    expect(decide(credits, [claimOf(1, 2, 3)]).standings).toEqual([{ remaining: 2, version: 2 }]);
    // A free 304 decided in version 1 arrives after the set: version 2's spending keeps its unit.
    credits.refund([claimOf(1, 1, 5)], spentInOne.standings, 1);
    expect(credits.assess([claimOf(1, 2, 3)], 1).standings).toEqual([{ remaining: 2, version: 2 }]);
    credits.refund([claimOf(1, 2, 3)], [{ remaining: 2, version: 2 }], 1);
    expect(credits.assess([claimOf(1, 2, 3)], 1).standings).toEqual([{ remaining: 3, version: 2 }]);
  });

  it("decides a claim of an older version (a key read before the set) on the stored version's base, not its own", () => {
    const credits = new MemoryCredits();
    expect(decide(credits, [claimOf(1, 2, 4, { spent: 0, version: 2 })]).standings).toEqual([{ remaining: 3, version: 2 }]);
    // Version 1 had 1,000 units; version 2 has 4, of which 1 is spent: 3 remain, whichever claim asks.
    expect(decide(credits, [claimOf(1, 1, 1_000)]).standings).toEqual([{ remaining: 2, version: 2 }]);
    expect(decide(credits, [claimOf(1, 1, 1_000)]).standings).toEqual([{ remaining: 1, version: 2 }]);
    expect(decide(credits, [claimOf(1, 2, 4)]).standings).toEqual([{ remaining: 0, version: 2 }]);
    expect(decide(credits, [claimOf(1, 1, 1_000)]).refusal).toBe('credits_exhausted');
  });

  it('forgets a balance gone: the next claim of it is unseeded again', () => {
    const credits = new MemoryCredits();
    decide(credits, [claimOf(1, 1, 5, { spent: 0, version: 1 }), claimOf(2, 1, 5, { spent: 0, version: 1 })]);
    credits.forget('key:1', 1);
    expect(credits.size).toBe(1);
    expect(credits.assess([claimOf(1, 1, 5)], 1).refusal).toBe('unseeded');
    expect(credits.assess([claimOf(2, 1, 5)], 1)).toEqual({ refusal: undefined, standings: [{ remaining: 4, version: 1 }] });
    // Another subject's balance of the same id is another balance.
    credits.forget('key:2', 2);
    expect(credits.size).toBe(1);
  });

  it('sweeps a balance neither seeded nor spent from for CREDITS_TTL_MS, and keeps one in use', () => {
    const clock = testClock(T0);
    const credits = new MemoryCredits();
    const [idle, used] = [claimOf(1, 1, 100, { spent: 0, version: 1 }), claimOf(2, 1, 100, { spent: 0, version: 1 })];
    decide(credits, [idle, used]);
    // A sweep a minute, as the memory store runs it; the used balance spent from every hour.
    for (let at = 0; at < CREDITS_TTL_MS + MINUTE_MS; at += MINUTE_MS) {
      clock.set(T0 + at);
      if (at > 0 && at % (60 * MINUTE_MS) === 0) decide(credits, [used]);
      credits.sweep(clock.now());
      // The first sweep finds both used; from the next on, the idle one is unused since T0: kept until CREDITS_TTL_MS have passed.
      expect(credits.size).toBe(at < CREDITS_TTL_MS ? 2 : 1);
    }
    expect(credits.assess([claimOf(1, 1, 100)], 1).refusal).toBe('unseeded');
    expect(credits.assess([claimOf(2, 1, 100)], 1).standings).toEqual([{ remaining: 75, version: 1 }]);
  });
});
