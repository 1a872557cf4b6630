import { CREDITS_TTL_MS, type CreditClaim, type CreditStanding } from './store.js';

/**
 * What the memory store holds of a balance: the version it counts in, the units spent in it and
 * its base (when a claim of that version brought it); whether it was seeded or spent from since the
 * last sweep, and since when sweeps have found it not.
 */
interface Balance {
  version: number;
  spent: number;
  base?: number;
  used: boolean;
  unusedSince?: number;
}

/** What a request's balances allow: every one holds its cost (undefined), or the refusal, nothing spent. */
export type CreditRefusal = 'credits_exhausted' | 'unseeded' | undefined;

/**
 * The balances of prepaid credits the memory store decides: one entry per balance in use, dropped
 * when the balance is gone (forget) or unused for CREDITS_TTL_MS (sweep), as Redis lets its hash
 * expire: never evicted sooner, since one forgotten is seeded again from its record, which may lag
 * the spending by a second.
 */
export class MemoryCredits {
  readonly #balances = new Map<string, Balance>();

  /**
   * The claims' balances as they stand, each seeded from its claim's record if missing and moved
   * to the claim's version if older (a set or refill: spending restarts from 0); nothing spent.
   * A claim of an older version (a request decided with its key read before the set) is decided on
   * the newer version's base, as the Redis script does.
   */
  assess(claims: readonly CreditClaim[], cost: number): { standings: CreditStanding[]; refusal: CreditRefusal } {
    let refusal: CreditRefusal;
    const standings = claims.map((claim) => {
      const balance = this.#balance(claim);
      if (!balance) {
        refusal = 'unseeded';
        return { remaining: null, version: claim.version };
      }
      const base = balance.version > claim.version ? (balance.base ?? claim.base) : claim.base;
      const remaining = base - balance.spent;
      if (remaining < cost) refusal ??= 'credits_exhausted';
      return { remaining, version: balance.version };
    });
    return { standings, refusal };
  }

  /** Spends the cost from every balance `assess` found holding it; the standings it returned, updated. */
  spend(claims: readonly CreditClaim[], standings: CreditStanding[], cost: number): CreditStanding[] {
    for (const claim of claims) {
      const balance = this.#balances.get(nameOf(claim))!;
      balance.spent += cost;
      balance.used = true;
    }
    return standings.map(({ remaining, version }) => ({ remaining: remaining! - cost, version }));
  }

  /** Gives the cost back to each balance still in the version it was spent in (`standings`, the decision's). */
  refund(claims: readonly CreditClaim[], standings: readonly CreditStanding[] | undefined, cost: number) {
    claims.forEach((claim, i) => {
      const balance = this.#balances.get(nameOf(claim));
      if (balance && balance.version === standings?.[i]?.version) balance.spent = Math.max(0, balance.spent - cost);
    });
  }

  /** Drops a balance gone. */
  forget(subject: string, id: number) {
    this.#balances.delete(nameOf({ subject, id }));
  }

  get size() {
    return this.#balances.size;
  }

  /** Drops the balances neither seeded nor spent from for CREDITS_TTL_MS: a sweep a minute keeps the hot path free of clocks. */
  sweep(now: number) {
    for (const [name, balance] of this.#balances) {
      if (balance.used) Object.assign(balance, { used: false, unusedSince: now });
      else if (now - (balance.unusedSince ?? now) >= CREDITS_TTL_MS) this.#balances.delete(name);
    }
  }

  #balance(claim: CreditClaim): Balance | undefined {
    const name = nameOf(claim);
    let balance = this.#balances.get(name);
    if (!balance) {
      if (!claim.seed) return undefined;
      const base = claim.seed.version === claim.version ? claim.base : undefined;
      this.#balances.set(name, (balance = { ...claim.seed, base, used: true }));
    }
    if (balance.version < claim.version) Object.assign(balance, { version: claim.version, spent: 0, base: claim.base, used: true });
    return balance;
  }
}

const nameOf = (claim: Pick<CreditClaim, 'subject' | 'id'>) => `${claim.subject}:${claim.id}`;
