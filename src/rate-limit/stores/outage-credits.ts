import type { Limits } from '../../plans/limits.js';
import type { MemoryStore } from './memory-store.js';
import type { BalanceRecords, RecordedBalance } from '../../credits/ports.js';
import { OutageSpending } from './outage-spending.js';
import type { RedisStore } from './redis-store.js';
import {
  served,
  uncounted,
  type Admission,
  type Claim,
  type CreditClaim,
  type CreditStanding,
  type Decision,
  type Shared,
  type SharedAdmission,
  type Windows,
} from './store.js';

const nameOf = (claim: CreditClaim) => `${claim.subject}:${claim.id}`;

/**
 * Each claim's standing as the record answered it: a balance removed meanwhile (no row) limits
 * nothing, until its key is read again.
 */
function standingsOf(claims: readonly CreditClaim[], balances: readonly RecordedBalance[], recorded: boolean): CreditStanding[] {
  return claims.map((claim) => {
    const balance = balances.find(({ id }) => id === claim.id);
    const { remaining, version } = balance ?? { remaining: claim.base, version: claim.version };
    return recorded ? { remaining, version, recorded: true as const } : { remaining, version };
  });
}

const NOTHING = async () => {};

/**
 * The fallback's decisions of requests with credits while Redis is unreachable: the windows and
 * slots in this instance's memory, as any request's, and the balances in PostgreSQL itself, so
 * that instances deciding apart spend exactly what remains. A request that counts and is served
 * spends in a transaction of the record (so not through the ledger's batch: `recorded`), its
 * balance's batch with the requests of it that arrived meanwhile (OutageSpending); one its
 * balances cannot pay for is refused for credits, what memory counted of it taken back, so that
 * it counts nothing, as on Redis. A check reads the record, locking nothing.
 */
export class OutageCredits {
  readonly #memory: MemoryStore;
  readonly #record: BalanceRecords;
  readonly #spending: OutageSpending;
  /** The balances spent from or given back to while Redis was unreachable: its copies of them missed it. */
  readonly #touched = new Map<string, CreditClaim>();

  constructor(memory: MemoryStore, record: BalanceRecords) {
    this.#memory = memory;
    this.#record = record;
    this.#spending = new OutageSpending(record);
  }

  async consume(subject: string, limits: Limits, now: number, cost: number, bans: boolean, claims: readonly CreditClaim[]) {
    const decision = await this.#memory.consume(subject, limits, now, cost, bans);
    return this.#decide(decision, claims, { cost, bans, count: true }, () => this.#memory.refund(subject, decision, cost), NOTHING);
  }

  async check(subject: string, limits: Limits, now: number, cost: number, claims: readonly CreditClaim[]) {
    const decision = await this.#memory.check(subject, limits, now, cost);
    return this.#decide(decision, claims, { cost, bans: true, count: false }, NOTHING, NOTHING);
  }

  async admit(subject: string, limits: Limits, now: number, claim: Claim, claims: readonly CreditClaim[]): Promise<Admission> {
    const admission = await this.#memory.admit(subject, limits, now, { ...claim, credits: undefined });
    if (admission.outcome === 'busy') return admission;
    const uncount = () => this.#memory.refund(subject, admission, claim.cost);
    return this.#decide(admission, claims, claim, uncount, () => this.#memory.release(subject, claim.slot.lease));
  }

  async decideShared(
    subject: string,
    limits: Limits,
    now: number,
    claim: Claim,
    shared: Shared,
    claims: readonly CreditClaim[],
  ): Promise<SharedAdmission> {
    const both = await this.#memory.decideShared(subject, limits, now, { ...claim, credits: undefined }, shared);
    const { admission, customer } = both;
    if (admission.outcome === 'busy') return both;
    const uncount = () => this.#memory.refundShared(subject, shared.subject, admission, claim.cost);
    const release = async () => void (await Promise.all([subject, shared.subject].map((of) => this.#memory.release(of, claim.slot.lease))));
    const decision = await this.#decide(admission, claims, claim, uncount, release);
    // Refused for credits once counted: the customer's windows lost it too.
    const taken = decision.outcome === 'credits_exhausted' && admission.outcome === 'allowed' && claim.count;
    return { admission: decision, customer: taken ? uncountedWindows(customer, claim.cost) : customer };
  }

  /**
   * Gives back in the record what a request taken back (a free 304) spent there, in the version it
   * was spent in. What it spent on Redis the ledger gives back; while Redis is unreachable, its
   * copy keeps it, so the balances are marked to be dropped from it.
   */
  async refund(decision: Decision, cost: number, claims: readonly CreditClaim[] | undefined, degraded: boolean) {
    const standings = decision.credits;
    if (!claims || !standings) return;
    if (degraded) this.#touch(claims);
    if (!standings[0]?.recorded) return;
    const versions = standings.map(({ version }) => version);
    await this.#record.giveBack(
      claims.map(({ id }) => id),
      versions,
      cost,
    );
  }

  /** Drops from Redis every balance touched while it was unreachable, so each is seeded again from its record; kept should that fail. */
  async forgetIn(redis: RedisStore) {
    const claims = [...this.#touched.values()];
    await redis.forgetCredits(claims);
    for (const claim of claims) this.#touched.delete(nameOf(claim));
  }

  /**
   * The balances' part of a decision memory made of the windows (and slots): a check reads the
   * record; a request that counts and is served spends from it, or is refused for credits with
   * what memory counted taken back (`uncount` its windows, `release` its slots).
   */
  async #decide(
    decision: Decision,
    claims: readonly CreditClaim[],
    { cost, bans, count }: Pick<Claim, 'cost' | 'bans' | 'count'>,
    uncount: () => Promise<void>,
    release: () => Promise<void>,
  ): Promise<Decision> {
    const ids = claims.map(({ id }) => id);
    // Only an allowed request was counted in the windows; a would-be refusal of shadow mode counted none (its count bans nobody).
    const takeBack = () => Promise.all([decision.outcome === 'allowed' ? uncount() : undefined, release()]);
    if (!count) {
      const credits = standingsOf(claims, await this.#record.remaining(ids), false);
      if (decision.outcome !== 'allowed' || credits.every(({ remaining }) => remaining! >= cost)) return { ...decision, credits };
      await release();
      return { ...decision, outcome: 'credits_exhausted', credits };
    }
    if (!served(decision, count, bans)) return decision;
    // The record unreachable too: the request fails as any that needs the database, having counted nothing.
    const spending = await this.#spending.spend(ids, cost).catch(async (error: unknown) => {
      await takeBack();
      throw error;
    });
    if (spending.spent) {
      this.#touch(claims);
      return { ...decision, credits: standingsOf(claims, spending.balances, true) };
    }
    await takeBack();
    const windows = decision.outcome === 'allowed' ? uncountedWindows(decision, cost) : { windows: decision.windows };
    return { outcome: 'credits_exhausted', ...windows, credits: standingsOf(claims, spending.balances, false) };
  }

  #touch(claims: readonly CreditClaim[]) {
    for (const claim of claims) this.#touched.set(nameOf(claim), claim);
  }
}

const uncountedWindows = ({ windows }: Windows, cost: number): Windows => ({ windows: windows.map((window) => uncounted(window, cost)) });
