import { Cluster, type Redis } from 'ioredis';
import type { Limits } from '../api-keys/plans.js';
import {
  DAY_MS,
  decideWithout,
  MINUTE_MS,
  usage,
  windowsOf,
  windowStart,
  type BanPolicy,
  type Bans,
  type Decision,
  type Inspection,
  type RateLimitStore,
  type StoreKind,
} from './store.js';

/**
 * The whole decision in one atomic round trip: the ban, both windows, the refusal count.
 * KEYS: minute count, day count, minute refusals, ban. ARGV: per-minute limit, per-day limit,
 * now (ms), ban threshold, ban duration (ms), minute TTL (ms), day TTL (ms), cost (units), bans
 * (1, or 0: no ban holds or starts, and KEYS[3] is the refusals counted apart).
 * Returns [outcome, minute used, day used, banned until or refusals]: outcome 1 allowed, 0 limited
 * (with the refusals this minute), 2 banned, 3 banned by this request. The ban holds its end
 * time, so an injected clock works.
 */
const DECIDE = `
local now = tonumber(ARGV[3])
local bans = ARGV[9] == '1'
local banned_until = bans and tonumber(redis.call('GET', KEYS[4]) or '0') or 0
local minute_used = tonumber(redis.call('GET', KEYS[1]) or '0')
local day_used = tonumber(redis.call('GET', KEYS[2]) or '0')
if banned_until > now then
  return {2, minute_used, day_used, banned_until}
end
local cost = tonumber(ARGV[8])
if minute_used + cost <= tonumber(ARGV[1]) and day_used + cost <= tonumber(ARGV[2]) then
  minute_used = redis.call('INCRBY', KEYS[1], cost)
  if minute_used == cost then redis.call('PEXPIRE', KEYS[1], ARGV[6]) end
  day_used = redis.call('INCRBY', KEYS[2], cost)
  if day_used == cost then redis.call('PEXPIRE', KEYS[2], ARGV[7]) end
  return {1, minute_used, day_used, 0}
end
local refused = redis.call('INCR', KEYS[3])
if refused == 1 then redis.call('PEXPIRE', KEYS[3], ARGV[6]) end
if bans and refused > tonumber(ARGV[4]) then
  banned_until = now + tonumber(ARGV[5])
  redis.call('SET', KEYS[4], banned_until, 'PX', tonumber(ARGV[5]) + ${DAY_MS})
  redis.call('DEL', KEYS[3])
  return {3, minute_used, day_used, banned_until}
end
return {0, minute_used, day_used, refused}
`;

/**
 * Takes a slot for a request in flight (KEYS[1]: a sorted set of leases by expiry) unless all are
 * taken, dropping the leases expired first. ARGV: now (ms), lease length (ms), limit, lease.
 * Returns 1 when taken, 0 when not.
 */
const ACQUIRE = `
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('ZADD', KEYS[1], tonumber(ARGV[1]) + tonumber(ARGV[2]), ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`;

/** How long a lease holds a slot unless renewed: what a request of an instance that stops can hold on to. */
const LEASE_MS = 5_000;
/** Leases of requests still in flight are renewed this often, well within their length. */
const LEASE_RENEWAL_MS = 1_000;

/** Takes a request's cost (ARGV) back from each count (KEYS: minute, day) that still holds it, down to 0 at most. */
const REFUND = `
for i = 1, 2 do
  local used = tonumber(redis.call('GET', KEYS[i]) or '0')
  if used > 0 then redis.call('DECRBY', KEYS[i], math.min(used, tonumber(ARGV[1]))) end
end
`;

declare module 'ioredis' {
  interface RedisCommander {
    decideRateLimit(...args: Array<string | number>): Promise<[number, number, number, number]>;
    refundRateLimit(minuteKey: string, dayKey: string, cost: number): Promise<null>;
    acquireSlot(key: string, now: number, leaseMs: number, limit: number, lease: string): Promise<0 | 1>;
  }
}

/** A literal for a SCAN MATCH pattern, its glob characters escaped. */
const globEscape = (text: string) => text.replace(/[*?[\]\\]/g, '\\$&');

/** DECIDE's first result: 0 when limited, else one of these (BAN_STARTED: banned by this very request). */
const ALLOWED = 1;
const BANNED = 2;
const BAN_STARTED = 3;

/** Counters shared by every instance through Redis: one count per subject, however many instances. */
export class RedisStore implements RateLimitStore {
  readonly redis: Redis | Cluster;
  readonly #ban: BanPolicy;
  readonly #prefix: string;
  readonly #now: () => number;
  /** The leases this instance holds, by the key of their subject's slots: renewed while held. */
  readonly #leases = new Map<string, Set<string>>();
  readonly #renewal: NodeJS.Timeout;

  constructor(redis: Redis | Cluster, ban: BanPolicy, prefix: string, now: () => number = Date.now) {
    this.redis = redis;
    this.redis.on('error', () => {});
    this.redis.defineCommand('decideRateLimit', { numberOfKeys: 4, lua: DECIDE });
    this.redis.defineCommand('refundRateLimit', { numberOfKeys: 2, lua: REFUND });
    this.redis.defineCommand('acquireSlot', { numberOfKeys: 1, lua: ACQUIRE });
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

  /** Where a subject's keys start; one hash tag per subject keeps them on one slot of a Redis Cluster. */
  #base(subject: string) {
    return `${this.#prefix}rl:{${subject}}`;
  }

  async consume(subject: string, limits: Limits, now: number, cost: number, bans: boolean): Promise<Decision> {
    const base = this.#base(subject);
    const minute = windowStart(now, MINUTE_MS);
    const [code, minuteUsed, dayUsed, last] = await this.redis.decideRateLimit(
      `${base}:m:${minute}`,
      `${base}:d:${windowStart(now, DAY_MS)}`,
      `${base}:${bans ? 'r' : 's'}:${minute}`,
      `${base}:ban`,
      limits.perMinute,
      limits.perDay,
      now,
      this.#ban.threshold,
      this.#ban.durationMs,
      2 * MINUTE_MS,
      2 * DAY_MS,
      cost,
      bans ? 1 : 0,
    );
    const windows = usage(limits, now, minuteUsed, dayUsed);
    if (code === BANNED || code === BAN_STARTED)
      return { outcome: 'banned', ...windows, bannedUntil: last, banStarted: code === BAN_STARTED };
    return code === ALLOWED ? { outcome: 'allowed', ...windows } : { outcome: 'limited', refusals: last, ...windows };
  }

  async acquire(subject: string, limit: number, lease: string, now: number): Promise<boolean> {
    const key = `${this.#base(subject)}:c`;
    if ((await this.redis.acquireSlot(key, now, LEASE_MS, limit, lease)) === 0) return false;
    let leases = this.#leases.get(key);
    if (!leases) this.#leases.set(key, (leases = new Set()));
    leases.add(lease);
    return true;
  }

  async release(subject: string, lease: string) {
    const key = `${this.#base(subject)}:c`;
    const leases = this.#leases.get(key);
    if (!leases?.delete(lease)) return;
    if (leases.size === 0) this.#leases.delete(key);
    await this.redis.zrem(key, lease);
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

  async check(subject: string, limits: Limits, now: number, cost: number): Promise<Decision> {
    const base = this.#base(subject);
    const [minuteUsed, dayUsed, bannedUntil] = await this.redis.mget(
      `${base}:m:${windowStart(now, MINUTE_MS)}`,
      `${base}:d:${windowStart(now, DAY_MS)}`,
      `${base}:ban`,
    );
    return decideWithout(limits, now, Number(minuteUsed ?? 0), Number(dayUsed ?? 0), Number(bannedUntil ?? 0), cost);
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
    const nodes = this.redis instanceof Cluster ? this.redis.nodes('master') : [this.redis];
    const keys: string[] = [];
    for (const node of nodes) {
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

  async refund(subject: string, decision: Decision, cost: number) {
    const base = this.#base(subject);
    const { minute, day } = windowsOf(decision);
    await this.redis.refundRateLimit(`${base}:m:${minute}`, `${base}:d:${day}`, cost);
  }

  async close() {
    clearInterval(this.#renewal);
    this.redis.disconnect();
  }
}
