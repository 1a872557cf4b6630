import type { Limits, RateWindow } from '../../plans/limits.js';
import { DAY_MS } from '../../platform/time.js';

/**
 * How long a store keeps a balance of credits neither seeded nor spent from: once dropped, its
 * next request seeds it from its record, which caught up with the spending long before.
 */
export const CREDITS_TTL_MS = DAY_MS;

/** One window of a subject's limits as a decision left it. */
export interface WindowUsage {
  name: string;
  limit: number;
  windowSeconds: number;
  /**
   * Units counted in it, this request's included when it was counted; of a sliding window, its
   * current fixed window's plus the previous one's, weighted by its share still inside the last
   * windowSeconds and rounded up (see slidingCount).
   */
  used: number;
  /** The start of the fixed window (of a sliding one, the current one) this decision counted in, in ms since the epoch. */
  start: number;
  /**
   * When the window resets, in ms since the epoch: a fixed one at its end; a sliding one, once it
   * has no room for the request's cost, when it next has; else at its current fixed window's end.
   */
  resetAt: number;
}

/** A decision's windows: each of the subject's limits, in their order (shortest first). */
export interface Windows {
  windows: WindowUsage[];
}

/** What a store read of one window: the count of its current fixed window and, of a sliding one, the previous one's (0 for a fixed). */
export interface WindowCount {
  current: number;
  previous: number;
}

/**
 * A balance of prepaid credits a request spends from (its key's quota's, its customer's): decided
 * with the windows in the same store call. The store keeps `{version, spent}` of it beside
 * `subject`'s counters (so in its Redis Cluster slot); remaining = `base` - spent.
 */
export interface CreditClaim {
  /** The subject the balance belongs to: the key's (keySubject) or its customer's (customerSubject). */
  subject: string;
  /** Its record's id (credit_balances). */
  id: number;
  /** The version and base the caller's identity holds: a stored version older than it was replaced by a set or refill. */
  version: number;
  base: number;
  /** The record as PostgreSQL holds it, for a balance the store answered unseeded: written only if the store still has none. */
  seed?: { spent: number; version: number };
}

/** A balance as a decision left it: what remains of it, under which version; `remaining` null when the store had none (unseeded). */
export interface CreditStanding {
  remaining: number | null;
  version: number;
  /** Spent in PostgreSQL itself (the fallback's, while Redis is unreachable): already in the record, so not for the ledger's batch. */
  recorded?: true;
}

/** What a store decided for one request, with both windows as they stand after it. */
export type Decision = (
  | ({ outcome: 'allowed' } & Windows)
  /** `refusals`: the subject's refusals this minute, this one included (0 for a check, which counts none). */
  | ({ outcome: 'limited'; refusals: number } & Windows)
  /** `bannedUntil`: when the ban ends, in ms since the epoch; `banStarted`: this request started it. */
  | ({ outcome: 'banned'; bannedUntil: number; banStarted: boolean } & Windows)
  /** A balance claimed has fewer units than the cost: nothing was counted (no window, no refusal, no slot). */
  | ({ outcome: 'credits_exhausted' } & Windows)
  /** A balance claimed is not in the store (never seen, or Redis flushed): nothing was counted; decide again with its seed. */
  | ({ outcome: 'unseeded' } & Windows)
) & {
  /** The balances claimed, in the claim's order, as the decision left them; absent without a claim. */
  credits?: CreditStanding[];
};

/** A request's claim on one of its subject's `limit` slots for requests in flight, held by `lease` (unique to the request). */
export interface Slot {
  limit: number;
  lease: string;
}

/** The slot of a claim that takes none of its subject's: a customer's key whose customer's slots alone are limited, or none at all. */
export const NO_SLOT: Slot = { limit: 0, lease: '' };

/** A request as admit takes it: its cost and bans (as consume's), whether it counts (false: as check would), and its slot. */
export interface Claim {
  cost: number;
  bans: boolean;
  count: boolean;
  slot: Slot;
  /** The balances of credits it spends from, decided with the windows: see consume. */
  credits?: readonly CreditClaim[];
}

/**
 * What admit decided: a decision, or `busy` when every slot was taken, with the standing `check`
 * would tell (nothing counted); of decideShared, `customerBusy` when the customer's slots were the ones taken.
 */
export type Admission = Decision | { outcome: 'busy'; standing: Decision; customerBusy?: boolean };

/** The customer's side of a request of one of its keys: the subject its limits count in, its windows, its slots (0: none). */
export interface Shared {
  subject: string;
  limits: Limits;
  slots: number;
}

/** What decideShared decided: the key's admission (its own windows), and the customer's windows as they stand after it. */
export interface SharedAdmission {
  admission: Admission;
  customer: Windows;
}

/** Shortest first, by name on a tie: the order of Limits, the headers and the quota endpoint. */
export const byLength = (a: Pick<RateWindow, 'name' | 'windowSeconds'>, b: Pick<RateWindow, 'name' | 'windowSeconds'>) =>
  a.windowSeconds - b.windowSeconds || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);

/**
 * What the headers and a 429 show of a customer's key: of each window the key and its customer
 * both have (same name and length), the one with fewer units left, the key's on a tie; the others as they are.
 */
export const lesserWindows = (own: readonly WindowUsage[], customer: readonly WindowUsage[]): WindowUsage[] => {
  const left = (window: WindowUsage) => window.limit - window.used;
  const same = (a: WindowUsage) => (b: WindowUsage) => a.name === b.name && a.windowSeconds === b.windowSeconds;
  const lesser = own.map((window) => {
    const theirs = customer.find(same(window));
    return theirs && left(theirs) < left(window) ? theirs : window;
  });
  return [...lesser, ...customer.filter((window) => !own.some(same(window)))].sort(byLength);
};

/** Whether a request so decided is served, and so holds the slot it asked for: allowed, or refused by its windows in shadow mode. */
export const served = (decision: Decision, count: boolean, bans: boolean) =>
  decision.outcome === 'allowed' || (count && !bans && decision.outcome === 'limited');

export interface BanPolicy {
  /** More refused requests than this within one minute window start a ban. */
  threshold: number;
  durationMs: number;
}

/**
 * Decides one request of a subject (a key or an address): allowed only when both windows have
 * room for its cost (the units it spends: 1 unless RATE_LIMIT_COSTS prices its operation), counted
 * in both when allowed and in neither when refused. Refusals are counted apart, per minute window,
 * for the ban. Stores own atomicity; the plugin owns the headers.
 */
export interface RateLimitStore {
  /**
   * `bans` false (shadow mode, the quota endpoint's own limit): no ban holds or starts, and the
   * refusals are counted apart, so that none of them counts towards a ban once bans apply again.
   */
  /**
   * With `credits`, each balance must also hold the cost (windows refuse first; in shadow mode too,
   * credits being money): the request is served and every balance spends the cost in the same step
   * as the windows count it, or it is `credits_exhausted` and nothing at all is counted. A balance
   * the store does not hold makes it `unseeded`, nothing counted: the caller decides again with
   * the balance's seed (its record). A stored version older than the claim's starts at 0 spent.
   */
  consume(subject: string, limits: Limits, now: number, cost: number, bans: boolean, credits?: readonly CreditClaim[]): Promise<Decision>;
  /**
   * Decides a request as consume would, but counts nothing, refusals and credits included: for a request known
   * beforehand to cost nothing (a 304). The caller consumes a refused one, to count the refusal.
   */
  check(subject: string, limits: Limits, now: number, cost: number, credits?: readonly CreditClaim[]): Promise<Decision>;
  /**
   * Takes back a request that `decision` allowed: it then counts in neither window, as if never
   * made. Only the windows it was counted in lose it; one that has rolled over since is left alone.
   * Its balances (`credits`, as claimed) get the cost back, each only under the version it was spent in.
   */
  refund(subject: string, decision: Decision, cost: number, credits?: readonly CreditClaim[]): Promise<void>;
  /** What `check` would decide, and which store answered: `memory` also for Redis's fallback during an outage. */
  inspect(subject: string, limits: Limits, now: number): Promise<Inspection>;
  /** The subjects starting with `prefix` that are banned now, and which store answered. */
  bans(prefix: string, now: number): Promise<Bans>;
  /**
   * Decides a request as consume would (as check would, `count` false) and takes one of the
   * subject's `slot.limit` slots for requests in flight in the same step, held by `slot.lease`
   * until released, or, should its instance stop, for a few seconds at most. The slots come first:
   * with every one taken the request is `busy` and counts nothing; a request taken in holds its
   * slot only if it is served (see served), so one the windows refuse holds none.
   */
  admit(subject: string, limits: Limits, now: number, claim: Claim): Promise<Admission>;
  /**
   * Decides a request of a customer's key against the key's subject and the customer's together,
   * in one step, as admit would (a `claim.slot` of limit 0: no slot of the key's own): allowed only
   * when both have room for its cost, counted in both or in neither; the slots of both (where they
   * have a limit) taken by the lease together, or none. The ban and the refusals that start it are
   * the key's alone: a request only the customer's windows refuse counts towards no ban (in shadow
   * mode, it is a would-be refusal of the key as any other).
   */
  decideShared(subject: string, limits: Limits, now: number, claim: Claim, shared: Shared): Promise<SharedAdmission>;
  /** Takes back a request decideShared allowed, from both subjects (as refund does). */
  refundShared(subject: string, customerSubject: string, decision: Decision, cost: number, credits?: readonly CreditClaim[]): Promise<void>;
  /**
   * Drops a balance of credits gone (removed, replaced by another, or its quota's keys all
   * revoked), kept under `subject`: nothing of it stays in the store; a request still claiming it
   * seeds it from its record again.
   */
  forgetBalance(subject: string, id: number): Promise<void>;
  /** Gives back the slot a lease holds, if it holds one. */
  release(subject: string, lease: string): Promise<void>;
  /** The subject's requests in flight now, on every instance that shares the store. */
  inFlight(subject: string, now: number): Promise<number>;
  /** Ends the subject's ban, if any, and forgets its refusals this minute; says which store it was lifted in. */
  liftBan(subject: string, now: number): Promise<StoreKind>;
  close(): Promise<void>;
}

export type StoreKind = 'memory' | 'redis';

export interface Bans {
  bans: Array<{ subject: string; bannedUntil: number }>;
  source: StoreKind;
}

export interface Inspection {
  decision: Decision;
  source: StoreKind;
}

export const windowStart = (now: number, size: number) => now - (now % size);

/** A sliding window's count: its current fixed window's, plus the previous one's share still inside the last windowSeconds, rounded up. */
export const slidingCount = (windowMs: number, elapsed: number, { current, previous }: WindowCount) =>
  current + Math.ceil((previous * (windowMs - elapsed)) / windowMs);

/**
 * When a sliding window that has no room for `cost` next has, with nothing more counted: within
 * its current fixed window as the previous one's share shrinks, else within the next one as the
 * current one's does.
 */
function slidingRoomAt(window: RateWindow, start: number, { current, previous }: WindowCount, cost: number) {
  const windowMs = window.windowSeconds * 1000;
  const spare = window.limit - cost - current;
  if (spare >= 0 && previous > 0) {
    const at = start + Math.ceil(windowMs - (spare * windowMs) / previous);
    if (at < start + windowMs) return at;
  }
  const spareNext = window.limit - cost;
  if (current <= spareNext) return start + windowMs;
  return start + windowMs + Math.ceil(windowMs - (Math.max(0, spareNext) * windowMs) / current);
}

/** One window as it stands at `now` with these counts, for a request of this cost. */
export function windowUsage(window: RateWindow, now: number, count: WindowCount, cost = 1): WindowUsage {
  const windowMs = window.windowSeconds * 1000;
  const start = windowStart(now, windowMs);
  const { name, limit, windowSeconds } = window;
  if (window.algorithm === 'fixed') return { name, limit, windowSeconds, used: count.current, start, resetAt: start + windowMs };
  const used = slidingCount(windowMs, now - start, count);
  const resetAt = used + cost > limit ? slidingRoomAt(window, start, count, cost) : start + windowMs;
  return { name, limit, windowSeconds, used, start, resetAt };
}

/** Each window of `limits` as it stands with these counts (in the same order). */
export const usage = (limits: Limits, now: number, counts: readonly WindowCount[], cost = 1): Windows => ({
  windows: limits.map((window, i) => windowUsage(window, now, counts[i] ?? NO_COUNT, cost)),
});

/** The count of a window nothing was counted in yet. */
export const NO_COUNT: WindowCount = { current: 0, previous: 0 };

/** A window as it stood before a request of this cost was counted in it. */
export const uncounted = (window: WindowUsage, cost: number): WindowUsage => ({ ...window, used: Math.max(0, window.used - cost) });

/** Whether every window has room for `cost` more units. */
export const hasRoom = ({ windows }: Windows, cost: number) => windows.every((window) => window.used + cost <= window.limit);

/** The decision on counts as they stand, for a request of this cost, without counting anything. */
export function decideWithout(limits: Limits, now: number, counts: readonly WindowCount[], bannedUntil: number, cost = 1): Decision {
  const windows = usage(limits, now, counts, cost);
  if (bannedUntil > now) return { outcome: 'banned', ...windows, bannedUntil, banStarted: false };
  return hasRoom(windows, cost) ? { outcome: 'allowed', ...windows } : { outcome: 'limited', refusals: 0, ...windows };
}
