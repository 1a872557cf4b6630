import type { CreditClaim, CreditStanding } from './store.js';

/** What the memory store holds of a balance: the version it counts in and the units spent in it. */
interface Balance {
  version: number;
  spent: number;
}

/** What a request's balances allow: every one holds its cost (undefined), or the refusal, nothing spent. */
export type CreditRefusal = 'credits_exhausted' | 'unseeded' | undefined;

/**
 * The balances of prepaid credits the memory store decides: one entry per balance, never evicted
 * (there are as many as balance records, and one forgotten would be seeded again from its record,
 * which may lag the spending by a second).
 */
export class MemoryCredits {
  readonly #balances = new Map<string, Balance>();

  /**
   * The claims' balances as they stand, each seeded from its claim's record if missing and moved
   * to the claim's version if older (a set or refill: spending restarts from 0); nothing spent.
   */
  assess(claims: readonly CreditClaim[], cost: number): { standings: CreditStanding[]; refusal: CreditRefusal } {
    let refusal: CreditRefusal;
    const standings = claims.map((claim) => {
      const balance = this.#balance(claim);
      if (!balance) {
        refusal = 'unseeded';
        return { remaining: null, version: claim.version };
      }
      const remaining = claim.base - balance.spent;
      if (remaining < cost) refusal ??= 'credits_exhausted';
      return { remaining, version: balance.version };
    });
    return { standings, refusal };
  }

  /** Spends the cost from every balance `assess` found holding it; the standings it returned, updated. */
  spend(claims: readonly CreditClaim[], standings: CreditStanding[], cost: number): CreditStanding[] {
    for (const claim of claims) this.#balances.get(nameOf(claim))!.spent += cost;
    return standings.map(({ remaining, version }) => ({ remaining: remaining! - cost, version }));
  }

  /** Gives the cost back to each balance still in the version it was spent in (`standings`, the decision's). */
  refund(claims: readonly CreditClaim[], standings: readonly CreditStanding[] | undefined, cost: number) {
    claims.forEach((claim, i) => {
      const balance = this.#balances.get(nameOf(claim));
      if (balance && balance.version === standings?.[i]?.version) balance.spent = Math.max(0, balance.spent - cost);
    });
  }

  #balance(claim: CreditClaim): Balance | undefined {
    const name = nameOf(claim);
    let balance = this.#balances.get(name);
    if (!balance) {
      if (!claim.seed) return undefined;
      this.#balances.set(name, (balance = { ...claim.seed }));
    }
    if (balance.version < claim.version) Object.assign(balance, { version: claim.version, spent: 0 });
    return balance;
  }
}

const nameOf = (claim: CreditClaim) => `${claim.subject}:${claim.id}`;
