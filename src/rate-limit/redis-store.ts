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
 * now (ms), ban threshold, ban duration (ms), minute TTL (ms), day TTL (ms), cost (units).
 * Returns [outcome, minute used, day used, banned until]: outcome 1 allowed, 0 limited,
 * 2 banned, 3 banned by this request. The ban holds its end time, so an injected clock works.
 */
const DECIDE = `
local now = tonumber(ARGV[3])
local banned_until = tonumber(redis.call('GET', KEYS[4]) or '0')
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
if refused > tonumber(ARGV[4]) then
  banned_until = now + tonumber(ARGV[5])
  redis.call('SET', KEYS[4], banned_until, 'PX', tonumber(ARGV[5]) + ${DAY_MS})
  redis.call('DEL', KEYS[3])
  return {3, minute_used, day_used, banned_until}
end
return {0, minute_used, day_used, 0}
`;

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

  constructor(redis: Redis | Cluster, ban: BanPolicy, prefix: string) {
    this.redis = redis;
    this.redis.on('error', () => {});
    this.redis.defineCommand('decideRateLimit', { numberOfKeys: 4, lua: DECIDE });
    this.redis.defineCommand('refundRateLimit', { numberOfKeys: 2, lua: REFUND });
    this.#ban = ban;
    this.#prefix = prefix;
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

  async consume(subject: string, limits: Limits, now: number, cost: number): Promise<Decision> {
    const base = this.#base(subject);
    const minute = windowStart(now, MINUTE_MS);
    const [code, minuteUsed, dayUsed, bannedUntil] = await this.redis.decideRateLimit(
      `${base}:m:${minute}`,
      `${base}:d:${windowStart(now, DAY_MS)}`,
      `${base}:r:${minute}`,
      `${base}:ban`,
      limits.perMinute,
      limits.perDay,
      now,
      this.#ban.threshold,
      this.#ban.durationMs,
      2 * MINUTE_MS,
      2 * DAY_MS,
      cost,
    );
    const windows = usage(limits, now, minuteUsed, dayUsed);
    if (code === BANNED || code === BAN_STARTED) return { outcome: 'banned', ...windows, bannedUntil, banStarted: code === BAN_STARTED };
    return { outcome: code === ALLOWED ? 'allowed' : 'limited', ...windows };
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
    this.redis.disconnect();
  }
}
