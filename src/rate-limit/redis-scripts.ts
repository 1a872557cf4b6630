import type { Cluster, Redis } from 'ioredis';
import { DAY_MS } from './store.js';

/**
 * The whole decision in one atomic round trip: the leases given back, the slot, the ban, both
 * windows, the refusal count. KEYS: minute count, day count, minute refusals, ban, leases (a sorted
 * set of the subject's slots in flight, by expiry). ARGV: per-minute limit, per-day limit, now (ms),
 * ban threshold, ban duration (ms), minute TTL (ms), day TTL (ms), cost (units), bans (1, or 0: no
 * ban holds or starts, and KEYS[3] is the refusals counted apart), count (1, or 0: decides as a
 * check, counting nothing), slots (the limit; 0 takes none), lease, lease length (ms), then the
 * leases this instance gives back, expired first.
 * Returns [outcome, minute used, day used, banned until or refusals, slot taken (1 or 0)]: outcome
 * 1 allowed, 0 limited (with the refusals this minute), 2 banned, 3 banned by this request, 4 every
 * slot taken (with the ban's end, if any: a check's standing). The ban holds its end time, so an
 * injected clock works. A slot is taken, the expired leases dropped first, only by a request
 * served: allowed, or limited in shadow mode. A lease given back is expired and dropped with them,
 * not ZREMed: INFO commandstats counts a script's commands too, and its ZREMs then count the
 * releases sent on their own alone (see docs/decisions/redis-one-round-trip.md).
 */
const DECIDE = `
local now = tonumber(ARGV[3])
local bans = ARGV[9] == '1'
local count = ARGV[10] == '1'
local slots = tonumber(ARGV[11])
for i = 14, #ARGV do redis.call('ZADD', KEYS[5], 'XX', 0, ARGV[i]) end
if slots > 0 or #ARGV > 13 then redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now) end
local ban_end = tonumber(redis.call('GET', KEYS[4]) or '0')
local minute_used = tonumber(redis.call('GET', KEYS[1]) or '0')
local day_used = tonumber(redis.call('GET', KEYS[2]) or '0')
if slots > 0 and redis.call('ZCARD', KEYS[5]) >= slots then return {4, minute_used, day_used, ban_end, 0} end
local function take_slot()
  if slots == 0 then return 0 end
  redis.call('ZADD', KEYS[5], now + tonumber(ARGV[13]), ARGV[12])
  redis.call('PEXPIRE', KEYS[5], ARGV[13])
  return 1
end
if (bans or not count) and ban_end > now then
  return {2, minute_used, day_used, ban_end, 0}
end
local cost = tonumber(ARGV[8])
if minute_used + cost <= tonumber(ARGV[1]) and day_used + cost <= tonumber(ARGV[2]) then
  if count then
    minute_used = redis.call('INCRBY', KEYS[1], cost)
    if minute_used == cost then redis.call('PEXPIRE', KEYS[1], ARGV[6]) end
    day_used = redis.call('INCRBY', KEYS[2], cost)
    if day_used == cost then redis.call('PEXPIRE', KEYS[2], ARGV[7]) end
  end
  return {1, minute_used, day_used, 0, take_slot()}
end
if not count then return {0, minute_used, day_used, 0, 0} end
local refused = redis.call('INCR', KEYS[3])
if refused == 1 then redis.call('PEXPIRE', KEYS[3], ARGV[6]) end
if not bans then return {0, minute_used, day_used, refused, take_slot()} end
if refused > tonumber(ARGV[4]) then
  local banned_until = now + tonumber(ARGV[5])
  redis.call('SET', KEYS[4], banned_until, 'PX', tonumber(ARGV[5]) + ${DAY_MS})
  redis.call('DEL', KEYS[3])
  return {3, minute_used, day_used, banned_until, 0}
end
return {0, minute_used, day_used, refused, 0}
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
    decideRateLimit(...args: Array<string | number>): Promise<DecideResult>;
    refundRateLimit(minuteKey: string, dayKey: string, cost: number): Promise<null>;
  }
}

/** DECIDE's answer: outcome, minute used, day used, banned until or refusals, slot taken. */
export type DecideResult = [number, number, number, number, number];

/** DECIDE's first result: 0 when limited, else one of these (BAN_STARTED: banned by this very request; BUSY: every slot taken). */
export const ALLOWED = 1;
export const BANNED = 2;
export const BAN_STARTED = 3;
export const BUSY = 4;

/** Makes the scripts commands of the client: decideRateLimit and refundRateLimit. */
export function defineScripts(redis: Redis | Cluster) {
  redis.defineCommand('decideRateLimit', { numberOfKeys: 5, lua: DECIDE });
  redis.defineCommand('refundRateLimit', { numberOfKeys: 2, lua: REFUND });
}
