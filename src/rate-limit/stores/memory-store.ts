import { Lru } from '../../platform/lib/lru.js';
import { MINUTE_MS } from '../../platform/time.js';
import type { Limits } from '../../plans/limits.js';
import { MemoryCredits } from './memory-credits.js';
import { WindowCounters } from './memory-windows.js';
import {
  decideWithout,
  hasRoom,
  served,
  usage,
  windowStart,
  type Windows,
  type BanPolicy,
  type Admission,
  type Bans,
  type Claim,
  type CreditClaim,
  type Decision,
  type Inspection,
  type RateLimitStore,
  type Shared,
  type SharedAdmission,
  type StoreKind,
} from './store.js';

interface Counters {
  windows: WindowCounters;
  /** The minute (aligned) whose refusals `refused` and `shadowRefused` count. */
  minute: number;
  refused: number;
  /** Refusals this minute in shadow mode, counted apart from those that ban. */
  shadowRefused: number;
  bannedUntil: number;
}

/** How many subjects one instance tracks at most; past it, the least recently seen is forgotten. */
const MAX_SUBJECTS = 100_000;

/**
 * Counters in this process: the default for one instance, and the fallback of an instance whose
 * Redis is unreachable (which decides balances of credits in their record, not here). A subject
 * costs one small entry, dropped once its windows and any ban are over; the cap bounds memory
 * however many distinct keys or addresses arrive.
 */
export class MemoryStore implements RateLimitStore {
  readonly #subjects: Lru<string, Counters>;
  /** The leases of each subject's requests in flight; a subject leaves with its last one. */
  readonly #inFlight = new Map<string, Set<string>>();
  readonly #ban: BanPolicy;
  readonly #sweeper: NodeJS.Timeout;
  readonly #credits = new MemoryCredits();

  constructor(ban: BanPolicy, { maxSubjects = MAX_SUBJECTS, now = Date.now } = {}) {
    this.#ban = ban;
    this.#subjects = new Lru(maxSubjects);
    this.#sweeper = setInterval(() => this.sweep(now()), MINUTE_MS).unref();
  }

  get size() {
    return this.#subjects.size;
  }

  async consume(
    subject: string,
    limits: Limits,
    now: number,
    cost: number,
    bans: boolean,
    credits?: readonly CreditClaim[],
  ): Promise<Decision> {
    return this.#decide(subject, limits, now, cost, bans, credits);
  }

  #decide(subject: string, limits: Limits, now: number, cost: number, bans: boolean, credits?: readonly CreditClaim[]): Decision {
    const counters = this.#current(subject, now);
    const windows = this.#windows(counters, limits, now, cost);
    if (bans && counters.bannedUntil > now) return { outcome: 'banned', ...windows, bannedUntil: counters.bannedUntil, banStarted: false };
    const room = hasRoom(windows, cost);
    // Served (allowed, or past its windows in shadow mode) only if every balance holds the cost too.
    const assessed = credits && (room || !bans) ? this.#credits.assess(credits, cost) : undefined;
    if (assessed?.refusal) return { outcome: assessed.refusal, ...windows, credits: assessed.standings };
    const decision = room ? this.#count(counters, limits, now, cost) : this.#refuse(counters, windows, now, bans);
    return assessed ? { ...decision, credits: this.#credits.spend(credits!, assessed.standings, cost) } : decision;
  }

  /** The subject's counters, its refusals rolled over to the minute `now` is in. */
  #current(subject: string, now: number): Counters {
    const minute = windowStart(now, MINUTE_MS);
    const counters = this.#take(subject, minute);
    if (counters.minute !== minute) Object.assign(counters, { minute, refused: 0, shadowRefused: 0 });
    return counters;
  }

  #windows = (counters: Counters, limits: Limits, now: number, cost: number) =>
    usage(limits, now, counters.windows.countsAt(limits, now), cost);

  /** Counts the cost in the subject's windows (and in `shared`'s, a customer's); the subject's windows are the decision's. */
  #count(counters: Counters, limits: Limits, now: number, cost: number, shared?: { counters: Counters; limits: Limits }): Decision {
    counters.windows.add(limits, now, cost);
    shared?.counters.windows.add(shared.limits, now, cost);
    return { outcome: 'allowed', ...this.#windows(counters, limits, now, cost) };
  }

  /** Counts a refusal of the subject: apart in shadow mode (`bans` false), else towards its ban. */
  #refuse(counters: Counters, windows: Windows, now: number, bans: boolean): Decision {
    if (!bans) return { outcome: 'limited', refusals: ++counters.shadowRefused, ...windows };
    counters.refused += 1;
    if (counters.refused > this.#ban.threshold) {
      counters.refused = 0;
      counters.bannedUntil = now + this.#ban.durationMs;
      return { outcome: 'banned', ...windows, bannedUntil: counters.bannedUntil, banStarted: true };
    }
    return { outcome: 'limited', refusals: counters.refused, ...windows };
  }

  async check(subject: string, limits: Limits, now: number, cost: number, credits?: readonly CreditClaim[]): Promise<Decision> {
    return this.#withCredits(this.#check(subject, limits, now, cost), cost, credits);
  }

  /** A decision that counts nothing, with its balances' standings; refused when one of them does not hold the cost. */
  #withCredits(decision: Decision, cost: number, credits: readonly CreditClaim[] | undefined): Decision {
    if (!credits) return decision;
    const { standings, refusal } = this.#credits.assess(credits, cost);
    return { ...decision, outcome: refusal && decision.outcome === 'allowed' ? refusal : decision.outcome, credits: standings } as Decision;
  }

  #check(subject: string, limits: Limits, now: number, cost: number): Decision {
    const counters = this.#subjects.peek(subject);
    if (!counters) return decideWithout(limits, now, [], 0, cost);
    return decideWithout(limits, now, counters.windows.countsAt(limits, now), counters.bannedUntil, cost);
  }

  async inspect(subject: string, limits: Limits, now: number): Promise<Inspection> {
    return { decision: await this.check(subject, limits, now, 1), source: 'memory' };
  }

  async bans(prefix: string, now: number): Promise<Bans> {
    const bans: Bans['bans'] = [];
    for (const [subject, { bannedUntil }] of this.#subjects.entries()) {
      if (bannedUntil > now && subject.startsWith(prefix)) bans.push({ subject, bannedUntil });
    }
    return { bans, source: 'memory' };
  }

  async liftBan(subject: string): Promise<StoreKind> {
    const counters = this.#subjects.peek(subject);
    if (counters) Object.assign(counters, { bannedUntil: 0, refused: 0 });
    return 'memory';
  }

  async admit(subject: string, limits: Limits, now: number, { cost, bans, count, slot, credits }: Claim): Promise<Admission> {
    const leases = this.#inFlight.get(subject);
    if (leases && leases.size >= slot.limit) return { outcome: 'busy', standing: this.#check(subject, limits, now, cost) };
    const decision = count
      ? this.#decide(subject, limits, now, cost, bans, credits)
      : this.#withCredits(this.#check(subject, limits, now, cost), cost, credits);
    if (served(decision, count, bans)) this.#hold(subject, slot.lease);
    return decision;
  }

  async decideShared(subject: string, limits: Limits, now: number, claim: Claim, shared: Shared): Promise<SharedAdmission> {
    const customerNow = () => ({ windows: this.#check(shared.subject, shared.limits, now, claim.cost).windows });
    const full = (of: string, limit: number) => limit > 0 && (this.#inFlight.get(of)?.size ?? 0) >= limit;
    const customerBusy = full(shared.subject, shared.slots);
    if (customerBusy || full(subject, claim.slot.limit)) {
      const standing = this.#check(subject, limits, now, claim.cost);
      return { admission: { outcome: 'busy', standing, customerBusy }, customer: customerNow() };
    }
    const decision = claim.count
      ? this.#decideBoth(subject, limits, now, claim, shared)
      : this.#withCredits(this.#checkBoth(subject, limits, now, claim, shared), claim.cost, claim.credits);
    if (served(decision, claim.count, claim.bans)) {
      if (claim.slot.limit > 0) this.#hold(subject, claim.slot.lease);
      if (shared.slots > 0) this.#hold(shared.subject, claim.slot.lease);
    }
    return { admission: decision, customer: customerNow() };
  }

  /** decideShared's counting decision: both subjects counted, or neither; the refusals the key's. */
  #decideBoth(subject: string, limits: Limits, now: number, { cost, bans, credits }: Claim, shared: Shared): Decision {
    const own = this.#current(subject, now);
    const windows = this.#windows(own, limits, now, cost);
    if (bans && own.bannedUntil > now) return { outcome: 'banned', ...windows, bannedUntil: own.bannedUntil, banStarted: false };
    const customer = this.#current(shared.subject, now);
    const ownRoom = hasRoom(windows, cost);
    const room = ownRoom && hasRoom(this.#windows(customer, shared.limits, now, cost), cost);
    // Served (allowed, or past the windows in shadow mode) only if every balance holds the cost too.
    const assessed = credits && (room || !bans) ? this.#credits.assess(credits, cost) : undefined;
    if (assessed?.refusal) return { outcome: assessed.refusal, ...windows, credits: assessed.standings };
    const spent = (decision: Decision) =>
      assessed ? { ...decision, credits: this.#credits.spend(credits!, assessed.standings, cost) } : decision;
    if (room) return spent(this.#count(own, limits, now, cost, { counters: customer, limits: shared.limits }));
    // Refused by the customer's windows alone: towards no ban of the key, unless a would-be refusal of shadow mode.
    if (ownRoom && bans) return { outcome: 'limited', refusals: own.refused, ...windows };
    return spent(this.#refuse(own, windows, now, bans));
  }

  /** decideShared's decision counting nothing: the key's ban or windows, then the customer's. */
  #checkBoth(subject: string, limits: Limits, now: number, { cost }: Claim, shared: Shared): Decision {
    const own = this.#check(subject, limits, now, cost);
    if (own.outcome !== 'allowed' || this.#check(shared.subject, shared.limits, now, cost).outcome === 'allowed') return own;
    return { ...own, outcome: 'limited', refusals: 0 };
  }

  #hold(subject: string, lease: string) {
    let leases = this.#inFlight.get(subject);
    if (!leases) this.#inFlight.set(subject, (leases = new Set()));
    leases.add(lease);
  }

  async release(subject: string, lease: string) {
    const leases = this.#inFlight.get(subject);
    if (leases?.delete(lease) && leases.size === 0) this.#inFlight.delete(subject);
  }

  async inFlight(subject: string): Promise<number> {
    return this.#inFlight.get(subject)?.size ?? 0;
  }

  async refund(subject: string, decision: Decision, cost: number, credits?: readonly CreditClaim[]) {
    if (credits) this.#credits.refund(credits, decision.credits, cost);
    const counters = this.#subjects.peek(subject);
    if (!counters) return;
    counters.windows.takeBack(decision.windows, cost);
  }

  async refundShared(subject: string, customerSubject: string, decision: Decision, cost: number, credits?: readonly CreditClaim[]) {
    await Promise.all([this.refund(subject, decision, cost, credits), this.refund(customerSubject, decision, cost)]);
  }

  async forgetBalance(subject: string, id: number) {
    this.#credits.forget(subject, id);
  }

  /** The balances of credits held. */
  get creditBalances() {
    return this.#credits.size;
  }

  /** Forgets subjects whose windows and ban are all over (nothing of them matters any more), and balances long unused. */
  sweep(now: number) {
    for (const [subject, counters] of this.#subjects.entries()) {
      if (counters.windows.stale(now) && counters.bannedUntil <= now) this.#subjects.delete(subject);
    }
    this.#credits.sweep(now);
  }

  async close() {
    clearInterval(this.#sweeper);
  }

  /** The subject's counters, moved to the most recently seen end; the least recent go past the cap. */
  #take(subject: string, minute: number): Counters {
    const counters = this.#subjects.get(subject);
    if (counters) return counters;
    const fresh = { windows: new WindowCounters(), minute, refused: 0, shadowRefused: 0, bannedUntil: 0 };
    this.#subjects.set(subject, fresh);
    return fresh;
  }
}
