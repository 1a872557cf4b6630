import { Cluster, type Redis } from 'ioredis';
import { MINUTE_MS } from '../../platform/time.js';
import type { Limits } from '../../plans/limits.js';
import type { LiveBalances } from '../../credits/ports.js';
import { CREDIT_KEY_INFIX, creditStandings, globEscape, readLiveBalances, scanLiveBalances } from './redis-credits.js';
import {
  ALLOWED,
  BAN_STARTED,
  BANNED,
  BUSY,
  COUNTS_AT,
  countsAt,
  CREDITS_EXHAUSTED,
  afterCounts,
  decisionArgs,
  defineScripts,
  scriptArgs,
  UNSEEDED,
  type DecideResult,
  type DecisionCall,
  type WindowCall,
} from './redis-scripts.js';
import {
  decideWithout,
  NO_SLOT,
  usage,
  windowStart,
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
  type WindowUsage,
} from './store.js';

/** How long a lease holds a slot unless renewed: what a request of an instance that stops can hold on to. */
const LEASE_MS = 5_000;
/** Leases of requests still in flight are renewed this often, well within their length. */
const LEASE_RENEWAL_MS = 1_000;

/**
 * Leases given back and not yet sent, for one subject's slots: the next decision of that subject
 * carries them, else the flush at the end of the event loop's turn sends them in one ZREM.
 * `sent` settles with whichever command took them, so an answer waits for its slot to be free.
 */
interface Releases {
  leases: string[];
  sent: Promise<void>;
  sendWith(command: Promise<unknown>): void;
}

function newReleases(): Releases {
  let sendWith!: Releases['sendWith'];
  const sent = new Promise<void>((resolve, reject) => {
    sendWith = (command) => void command.then(() => resolve(), reject);
  });
  return { leases: [], sent, sendWith };
}

/**
 * The key of a window's counter, by its length and the start of its fixed window: a minute's and a
 * day's keep the names of earlier builds, so that their counts carry over during a rolling deploy.
 */
export const counterKey = (base: string, windowSeconds: number, start: number) =>
  windowSeconds === 60 ? `${base}:m:${start}` : windowSeconds === 86_400 ? `${base}:d:${start}` : `${base}:w${windowSeconds}:${start}`;

/** Each window of `limits` at `now` as the scripts take it, its counters under `base` (a sliding one's previous too). */
function windowCalls(base: string, limits: Limits, now: number): WindowCall[] {
  return limits.map(({ limit, windowSeconds, algorithm }) => {
    const windowMs = windowSeconds * 1000;
    const start = windowStart(now, windowMs);
    const sliding = algorithm === 'sliding';
    const previous = sliding ? counterKey(base, windowSeconds, start - windowMs) : undefined;
    return { limit, windowMs, elapsed: now - start, sliding, current: counterKey(base, windowSeconds, start), previous };
  });
}

/** Counters shared by every instance through Redis: one count per subject, however many instances. */
export class RedisStore implements RateLimitStore {
  readonly redis: Redis | Cluster;
  readonly #ban: BanPolicy;
  readonly #prefix: string;
  readonly #now: () => number;
  /** The leases this instance holds, by the key of their subject's slots: renewed while held. */
  readonly #leases = new Map<string, Set<string>>();
  readonly #renewal: NodeJS.Timeout;
  /** Leases given back and not sent yet, by the key of their subject's slots. */
  readonly #releases = new Map<string, Releases>();
  #flushing = false;

  constructor(redis: Redis | Cluster, ban: BanPolicy, prefix: string, now: () => number = Date.now) {
    this.redis = redis;
    this.redis.on('error', () => {});
    defineScripts(this.redis);
    this.#ban = ban;
    this.#prefix = prefix;
    this.#now = now;
    this.#renewal = setInterval(() => this.#renewLeases(), LEASE_RENEWAL_MS).unref();
  }

  get ready() {
    return this.redis.status === 'ready';
  }

  /**
   * Connects, or stops waiting after `waitMs` while the client goes on trying in the background
   * (a Sentinel that never answers the handshake would otherwise hold up the start for good).
   */
  async connect(waitMs: number) {
    const connecting = this.redis.connect();
    let timer: NodeJS.Timeout | undefined;
    const gaveUp = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no Redis connection within ${waitMs} ms; still trying`)), waitMs);
    });
    try {
      await Promise.race([connecting, gaveUp]);
    } finally {
      clearTimeout(timer);
      connecting.catch(() => {});
    }
  }

  /**
   * Where a subject's keys start; one hash tag per subject keeps them on one slot of a Redis
   * Cluster. A subject that starts with a hash tag of its own (a customer's key: keySubject) keeps
   * it, and so shares the slot of its customer's subject.
   */
  #base(subject: string) {
    return subject.startsWith('{') ? `${this.#prefix}rl:${subject}` : `${this.#prefix}rl:{${subject}}`;
  }

  /** The releases queued for a subject's slots (`slots`, their key), now taken to be sent with a command. */
  #takeReleases(slots: string) {
    const releases = this.#releases.get(slots);
    this.#releases.delete(slots);
    return releases;
  }

  /** Remembers a lease this instance holds on a subject's slots, to renew it until it is given back. */
  #holdLease(slots: string, lease: string) {
    let leases = this.#leases.get(slots);
    if (!leases) this.#leases.set(slots, (leases = new Set()));
    leases.add(lease);
  }

  /** Where a balance of credits is kept: beside its subject's counters, on their Cluster slot. */
  #creditKey = (claim: Pick<CreditClaim, 'subject' | 'id'>) => `${this.#base(claim.subject)}${CREDIT_KEY_INFIX}${claim.id}`;

  /** Its balances of credits as they stand, which the record follows: all of them are SCANned on each master. */
  readonly live: LiveBalances = {
    read: (balances) => readLiveBalances(this.redis, balances.map(this.#creditKey)),
    all: () => scanLiveBalances(this.redis, this.#masters(), `${this.#prefix}rl:`),
  };

  /** Each node that holds keys: every master of a cluster. */
  #masters = () => (this.redis instanceof Cluster ? this.redis.nodes('master') : [this.redis]);

  /**
   * Runs DECIDE for the subject (DECIDE_SHARED, with its customer's side), carrying the releases of
   * their slots queued until now.
   */
  #decide(subject: string, limits: Limits, now: number, claim: Claim, shared?: Shared): Promise<DecideResult> {
    const own = this.#base(subject);
    const releases = this.#takeReleases(`${own}:c`);
    const customerReleases = shared && this.#takeReleases(`${this.#base(shared.subject)}:c`);
    const credits = claim.credits ?? [];
    const args = decisionArgs({
      keys: this.#subjectKeys(own, now, claim.bans),
      args: this.#decisionArgs(now, claim),
      windows: windowCalls(own, limits, now),
      customer: shared && this.#customerSide(shared, now),
      credits,
      creditKeys: credits.map(this.#creditKey),
      releases: releases?.leases ?? [],
      customerReleases: customerReleases?.leases ?? [],
    });
    const deciding = shared ? this.redis.decideSharedRateLimit(...args) : this.redis.decideRateLimit(...args);
    releases?.sendWith(deciding);
    customerReleases?.sendWith(deciding);
    return deciding;
  }

  /** A subject's refusals this minute (counted apart when they ban no one), ban and slots: the scripts' first KEYS. */
  #subjectKeys(base: string, now: number, bans: boolean): DecisionCall['keys'] {
    return { refusals: `${base}:${bans ? 'r' : 's'}:${windowStart(now, MINUTE_MS)}`, ban: `${base}:ban`, slots: `${base}:c` };
  }

  /** The scripts' first ARGV: the ban policy, the claim. */
  #decisionArgs(now: number, { cost, bans, count, slot }: Claim): DecisionCall['args'] {
    return {
      now,
      banThreshold: this.#ban.threshold,
      banMs: this.#ban.durationMs,
      cost,
      bans: bans ? 1 : 0,
      count: count ? 1 : 0,
      slots: slot.limit,
      lease: slot.lease,
      leaseMs: LEASE_MS,
    };
  }

  /** DECIDE_SHARED's KEYS and ARGV of a customer's key's customer: its slots, its windows. */
  #customerSide({ subject, limits, slots }: Shared, now: number): DecisionCall['customer'] {
    const base = this.#base(subject);
    return { keys: { customerSlots: `${base}:c` }, args: { customerSlots: slots }, windows: windowCalls(base, limits, now) };
  }

  /** The decision of a script's answer for a request of this cost: the subject's windows first, the balances' standings from `credits` on. */
  #decision(limits: Limits, now: number, decided: DecideResult, cost: number, credits = afterCounts(limits.length)): Decision {
    const [code, last] = decided;
    const windows = usage(limits, now, countsAt(decided, COUNTS_AT, limits.length), cost);
    const standings = decided.length > credits ? { credits: creditStandings(decided, credits) } : {};
    if (code === BANNED || code === BAN_STARTED)
      return { outcome: 'banned', ...windows, bannedUntil: last, banStarted: code === BAN_STARTED, ...standings };
    if (code === CREDITS_EXHAUSTED || code === UNSEEDED)
      return { outcome: code === UNSEEDED ? 'unseeded' : 'credits_exhausted', ...windows, ...standings };
    return code === ALLOWED
      ? { outcome: 'allowed', ...windows, ...standings }
      : { outcome: 'limited', refusals: last, ...windows, ...standings };
  }

  async consume(
    subject: string,
    limits: Limits,
    now: number,
    cost: number,
    bans: boolean,
    credits?: readonly CreditClaim[],
  ): Promise<Decision> {
    return this.#decision(limits, now, await this.#decide(subject, limits, now, { cost, bans, count: true, slot: NO_SLOT, credits }), cost);
  }

  async admit(subject: string, limits: Limits, now: number, claim: Claim): Promise<Admission> {
    const decided = await this.#decide(subject, limits, now, claim);
    const [code, banEnd, taken] = decided;
    const own = countsAt(decided, COUNTS_AT, limits.length);
    if (code === BUSY) return { outcome: 'busy', standing: decideWithout(limits, now, own, banEnd, claim.cost) };
    if (taken === 1) this.#holdLease(`${this.#base(subject)}:c`, claim.slot.lease);
    return this.#decision(limits, now, decided, claim.cost);
  }

  async decideShared(subject: string, limits: Limits, now: number, claim: Claim, shared: Shared): Promise<SharedAdmission> {
    const decided = await this.#decide(subject, limits, now, claim, shared);
    const [code, last, taken] = decided;
    const customerWindows = usage(shared.limits, now, countsAt(decided, afterCounts(limits.length), shared.limits.length), claim.cost);
    if (code === BUSY) {
      const standing = decideWithout(limits, now, countsAt(decided, COUNTS_AT, limits.length), last, claim.cost);
      return { admission: { outcome: 'busy', standing, customerBusy: taken === 1 }, customer: customerWindows };
    }
    if (taken === 1) {
      if (claim.slot.limit > 0) this.#holdLease(`${this.#base(subject)}:c`, claim.slot.lease);
      if (shared.slots > 0) this.#holdLease(`${this.#base(shared.subject)}:c`, claim.slot.lease);
    }
    const admission = this.#decision(limits, now, decided, claim.cost, afterCounts(limits.length + shared.limits.length));
    return { admission, customer: customerWindows };
  }

  /**
   * Queues the release for the subject's next decision or, failing one, the end of this turn of the
   * event loop: concurrent requests give their slots back in one command, not one each.
   */
  async release(subject: string, lease: string) {
    const key = `${this.#base(subject)}:c`;
    const leases = this.#leases.get(key);
    if (!leases?.delete(lease)) return;
    if (leases.size === 0) this.#leases.delete(key);
    let releases = this.#releases.get(key);
    if (!releases) this.#releases.set(key, (releases = newReleases()));
    releases.leases.push(lease);
    if (!this.#flushing) {
      this.#flushing = true;
      setImmediate(() => this.#flushReleases());
    }
    await releases.sent;
  }

  /** Sends the releases no decision carried: one ZREM per subject, sent together. */
  #flushReleases() {
    this.#flushing = false;
    for (const [key, releases] of this.#releases) releases.sendWith(this.redis.zrem(key, ...releases.leases));
    this.#releases.clear();
  }

  async inFlight(subject: string, now: number): Promise<number> {
    return this.redis.zcount(`${this.#base(subject)}:c`, `(${now}`, '+inf');
  }

  /** Moves the expiry of every lease still held a lease length ahead: one command per subject (its slot), sent together. */
  #renewLeases() {
    const expiry = this.#now() + LEASE_MS;
    for (const [key, leases] of this.#leases) {
      this.redis.zadd(key, 'XX', ...[...leases].flatMap((lease) => [expiry, lease])).catch(() => {});
      this.redis.pexpire(key, LEASE_MS).catch(() => {});
    }
  }

  /** With balances of credits, DECIDE counting nothing (one round trip, which seeds them); else one MGET. */
  async check(subject: string, limits: Limits, now: number, cost: number, credits?: readonly CreditClaim[]): Promise<Decision> {
    if (credits) {
      const claim = { cost, bans: true, count: false, slot: NO_SLOT, credits };
      return this.#decision(limits, now, await this.#decide(subject, limits, now, claim), cost);
    }
    const base = this.#base(subject);
    const windows = windowCalls(base, limits, now);
    const counters = windows.flatMap(({ current, previous }) => (previous ? [current, previous] : [current]));
    const [bannedUntil, ...stored] = await this.redis.mget(`${base}:ban`, ...counters);
    let at = 0;
    const read = () => Number(stored[at++] ?? 0);
    const counts = windows.map(({ previous }) => ({ current: read(), previous: previous ? read() : 0 }));
    return decideWithout(limits, now, counts, Number(bannedUntil ?? 0), cost);
  }

  async inspect(subject: string, limits: Limits, now: number): Promise<Inspection> {
    return { decision: await this.check(subject, limits, now, 1), source: 'redis' };
  }

  /**
   * SCANs every master for the ban keys of such subjects: a walk of the whole keyspace, for an
   * operator's occasional look, which leaves the decisions' single round trip alone.
   */
  async bans(prefix: string, now: number): Promise<Bans> {
    const start = this.#base(prefix).slice(0, -1);
    const match = `${globEscape(start)}*}:ban`;
    const keys: string[] = [];
    for (const node of this.#masters()) {
      for await (const batch of node.scanStream({ match, count: 1000 })) keys.push(...(batch as string[]));
    }
    // One GET each: on a cluster the keys live on many slots.
    const ends = await Promise.all(keys.map((key) => this.redis.get(key)));
    const bans = keys
      .map((key, i) => ({ subject: key.slice(start.length - prefix.length, -'}:ban'.length), bannedUntil: Number(ends[i] ?? 0) }))
      .filter(({ bannedUntil }) => bannedUntil > now);
    return { bans, source: 'redis' };
  }

  async liftBan(subject: string, now: number): Promise<StoreKind> {
    const base = this.#base(subject);
    // One slot (the subject's hash tag), so a cluster takes both in one command.
    await this.redis.del(`${base}:ban`, `${base}:r:${windowStart(now, MINUTE_MS)}`);
    return 'redis';
  }

  /** The counters these windows counted in, each once (windows of the same length share theirs): each one's current fixed window's. */
  #countedIn(subject: string, windows: readonly WindowUsage[]) {
    const base = this.#base(subject);
    return [...new Set(windows.map(({ windowSeconds, start }) => counterKey(base, windowSeconds, start)))];
  }

  async refund(subject: string, decision: Decision, cost: number, credits?: readonly CreditClaim[]) {
    await this.#refund(this.#countedIn(subject, decision.windows), decision, cost, credits);
  }

  /** The decision's windows are its key's and its customer's (see lesserWindows): each subject's counters of them, where it has one. */
  async refundShared(subject: string, customerSubject: string, decision: Decision, cost: number, credits?: readonly CreditClaim[]) {
    const counters = [...this.#countedIn(subject, decision.windows), ...this.#countedIn(customerSubject, decision.windows)];
    await this.#refund(counters, decision, cost, credits);
  }

  /** REFUND of the counts, and of the balances the decision spent from, each in the version it spent in. */
  async #refund(counts: string[], decision: Decision, cost: number, credits: readonly CreditClaim[] = []) {
    const spent = decision.credits ? credits : [];
    const versions = spent.map((_, i) => decision.credits![i]!.version);
    await this.redis.refundRateLimit(...scriptArgs([...counts, ...spent.map(this.#creditKey)], [cost, ...versions]));
  }

  /** Drops these balances, so the next request of each seeds it from its record again (see FallbackStore). */
  async forgetCredits(claims: ReadonlyArray<Pick<CreditClaim, 'subject' | 'id'>>) {
    // One DEL per balance: on a cluster they live on many slots.
    await Promise.all(claims.map((claim) => this.redis.del(this.#creditKey(claim))));
  }

  forgetBalance = (subject: string, id: number) => this.forgetCredits([{ subject, id }]);

  async close() {
    clearInterval(this.#renewal);
    this.redis.disconnect();
  }
}
