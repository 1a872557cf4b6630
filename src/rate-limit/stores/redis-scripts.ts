import type { Cluster, Redis } from 'ioredis';
import { CREDITS_TTL_MS, DAY_MS } from './store.js';

/**
 * The balances of prepaid credits a request claims (0, 1 or 2), in both decision scripts: each a
 * hash {v: version, s: spent, b: base of that version} at KEYS[first_key + i - 1], with four ARGV
 * from first_arg + 4 (i - 1): the base and version the caller's identity holds, then the record's
 * spent and version to seed a missing hash with ('' for none). A hash of an older version is moved
 * to the claim's, at 0 spent (a set or refill replaced it). A claim of an older version than the
 * hash's (its instance not yet told of the set or refill) is decided on the hash's base, never
 * moving it back. Each write renews the hash's expiry. credit_balances answers 0 when every balance
 * holds the cost, 5 when one does not, 6 when one is missing and no seed came (unseeded: the
 * caller reads the record and decides again), with the standing of each: remaining (false when
 * unseeded), version.
 */
const CREDITS = `
local function credit_balances(first_key, first_arg, n, cost)
  local state, standing = 0, {}
  for i = 1, n do
    local key, a = KEYS[first_key + i - 1], first_arg + 4 * (i - 1)
    local base, version = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
    local stored = redis.call('HMGET', key, 'v', 's', 'b')
    local v, s, b = tonumber(stored[1]), tonumber(stored[2]), tonumber(stored[3])
    if v == nil and ARGV[a + 2] ~= '' then
      v, s = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 2])
      redis.call('HSET', key, 'v', v, 's', s)
      if v == version then b = base; redis.call('HSET', key, 'b', base) end
      redis.call('PEXPIRE', key, ${CREDITS_TTL_MS})
    end
    if v ~= nil and v < version then
      v, s, b = version, 0, base
      redis.call('HSET', key, 'v', v, 's', 0, 'b', base)
      redis.call('PEXPIRE', key, ${CREDITS_TTL_MS})
    end
    if v ~= nil and v > version and b ~= nil then base = b end
    if v == nil then
      state = 6
      standing[2 * i - 1], standing[2 * i] = false, version
    else
      if base - s < cost and state == 0 then state = 5 end
      standing[2 * i - 1], standing[2 * i] = base - s, v
    end
  end
  return state, standing
end
local function spend_credits(first_key, n, cost, standing)
  for i = 1, n do
    redis.call('HINCRBY', KEYS[first_key + i - 1], 's', cost)
    redis.call('PEXPIRE', KEYS[first_key + i - 1], ${CREDITS_TTL_MS})
    standing[2 * i - 1] = standing[2 * i - 1] - cost
  end
end
`;

/**
 * The whole decision in one atomic round trip: the leases given back, the slot, the ban, both
 * windows, the refusal count. KEYS: minute count, day count, minute refusals, ban, leases (a sorted
 * set of the subject's slots in flight, by expiry). ARGV: per-minute limit, per-day limit, now (ms),
 * ban threshold, ban duration (ms), minute TTL (ms), day TTL (ms), cost (units), bans (1, or 0: no
 * ban holds or starts, and KEYS[3] is the refusals counted apart), count (1, or 0: decides as a
 * check, counting nothing), slots (the limit; 0 takes none), lease, lease length (ms), the number
 * of balances of credits claimed (KEYS from 6, ARGV from 15: see CREDITS), then the leases this
 * instance gives back, expired first.
 * Returns [outcome, minute used, day used, banned until or refusals, slot taken (1 or 0)], then each
 * balance's remaining and version when they were decided: outcome 1 allowed, 0 limited (with the
 * refusals this minute), 2 banned, 3 banned by this request, 4 every slot taken (with the ban's
 * end, if any: a check's standing), 5 a balance has fewer units than the cost, 6 a balance
 * unseeded (5 and 6 count nothing; windows refuse first). The ban holds its end time, so an
 * injected clock works. A slot is taken, the expired leases dropped first, only by a request
 * served: allowed, or limited in shadow mode. A lease given back is expired and dropped with them,
 * not ZREMed: INFO commandstats counts a script's commands too, and its ZREMs then count the
 * releases sent on their own alone (see docs/decisions/redis-one-round-trip.md).
 */
const DECIDE = `${CREDITS}
local now = tonumber(ARGV[3])
local bans = ARGV[9] == '1'
local count = ARGV[10] == '1'
local slots = tonumber(ARGV[11])
local credit_count = tonumber(ARGV[14])
local releases = 15 + 4 * credit_count
for i = releases, #ARGV do redis.call('ZADD', KEYS[5], 'XX', 0, ARGV[i]) end
if slots > 0 or #ARGV >= releases then redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now) end
local ban_end = tonumber(redis.call('GET', KEYS[4]) or '0')
local minute_used = tonumber(redis.call('GET', KEYS[1]) or '0')
local day_used = tonumber(redis.call('GET', KEYS[2]) or '0')
local standing = {}
local function answer(outcome, last, taken)
  local result = {outcome, minute_used, day_used, last, taken}
  for i = 1, 2 * credit_count do result[5 + i] = standing[i] end
  return result
end
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
local room = minute_used + cost <= tonumber(ARGV[1]) and day_used + cost <= tonumber(ARGV[2])
local credits = 0
if credit_count > 0 and (room or not bans or not count) then credits, standing = credit_balances(6, 15, credit_count, cost) end
if credits > 0 and (room or count) then return answer(credits, 0, 0) end
if room then
  if count then
    minute_used = redis.call('INCRBY', KEYS[1], cost)
    if minute_used == cost then redis.call('PEXPIRE', KEYS[1], ARGV[6]) end
    day_used = redis.call('INCRBY', KEYS[2], cost)
    if day_used == cost then redis.call('PEXPIRE', KEYS[2], ARGV[7]) end
    spend_credits(6, #standing / 2, cost, standing)
  end
  return answer(1, 0, take_slot())
end
if not count then return answer(0, 0, 0) end
local refused = redis.call('INCR', KEYS[3])
if refused == 1 then redis.call('PEXPIRE', KEYS[3], ARGV[6]) end
if not bans then
  spend_credits(6, #standing / 2, cost, standing)
  return answer(0, refused, take_slot())
end
if refused > tonumber(ARGV[4]) then
  local banned_until = now + tonumber(ARGV[5])
  redis.call('SET', KEYS[4], banned_until, 'PX', tonumber(ARGV[5]) + ${DAY_MS})
  redis.call('DEL', KEYS[3])
  return {3, minute_used, day_used, banned_until, 0}
end
return {0, minute_used, day_used, refused, 0}
`;

/**
 * DECIDE for a request of a customer's key: the key's subject (KEYS 1 to 5, as DECIDE's) and its
 * customer's (KEYS 6 to 8: minute count, day count, leases), one hash tag for all (see keySubject).
 * ARGV: DECIDE's first 13 (slots 0: no slot of the key's own), then the customer's per-minute limit,
 * per-day limit and slots (0: none), the number of balances of credits claimed (KEYS from 9, ARGV
 * from 18: see CREDITS), the number of leases given back from the key's slots, those leases, then
 * the leases given back from the customer's. Allowed only when both have room, counted
 * in both or neither; a lease takes both subjects' slots or none. The ban and refusals are the
 * key's: a refusal by the customer's windows alone counts towards no ban (in shadow mode it is
 * counted apart, as any). A script of its own, so that keys without a customer run DECIDE as before.
 * Returns DECIDE's five (for every slot taken, the fifth is 1 when the customer's were), then the
 * customer's minute used and day used, then each balance's remaining and version when decided.
 */
const DECIDE_SHARED = `${CREDITS}
local now = tonumber(ARGV[3])
local bans = ARGV[9] == '1'
local count = ARGV[10] == '1'
local slots = tonumber(ARGV[11])
local shared_slots = tonumber(ARGV[16])
local credit_count = tonumber(ARGV[17])
local first_release = 19 + 4 * credit_count
local own_releases = first_release - 1 + tonumber(ARGV[first_release - 1])
for i = first_release, own_releases do redis.call('ZADD', KEYS[5], 'XX', 0, ARGV[i]) end
for i = own_releases + 1, #ARGV do redis.call('ZADD', KEYS[8], 'XX', 0, ARGV[i]) end
if slots > 0 or own_releases >= first_release then redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now) end
if shared_slots > 0 or #ARGV > own_releases then redis.call('ZREMRANGEBYSCORE', KEYS[8], '-inf', now) end
local ban_end = tonumber(redis.call('GET', KEYS[4]) or '0')
local minute_used = tonumber(redis.call('GET', KEYS[1]) or '0')
local day_used = tonumber(redis.call('GET', KEYS[2]) or '0')
local shared_minute = tonumber(redis.call('GET', KEYS[6]) or '0')
local shared_day = tonumber(redis.call('GET', KEYS[7]) or '0')
local standing = {}
local function answer(outcome, last, taken)
  local result = {outcome, minute_used, day_used, last, taken, shared_minute, shared_day}
  for i = 1, 2 * credit_count do result[7 + i] = standing[i] end
  return result
end
if shared_slots > 0 and redis.call('ZCARD', KEYS[8]) >= shared_slots then return answer(4, ban_end, 1) end
if slots > 0 and redis.call('ZCARD', KEYS[5]) >= slots then return answer(4, ban_end, 0) end
local function take_slots()
  for _, taken in ipairs({{5, slots}, {8, shared_slots}}) do
    if taken[2] > 0 then
      redis.call('ZADD', KEYS[taken[1]], now + tonumber(ARGV[13]), ARGV[12])
      redis.call('PEXPIRE', KEYS[taken[1]], ARGV[13])
    end
  end
  return (slots > 0 or shared_slots > 0) and 1 or 0
end
if (bans or not count) and ban_end > now then return answer(2, ban_end, 0) end
local cost = tonumber(ARGV[8])
local own_room = minute_used + cost <= tonumber(ARGV[1]) and day_used + cost <= tonumber(ARGV[2])
local room = own_room and shared_minute + cost <= tonumber(ARGV[14]) and shared_day + cost <= tonumber(ARGV[15])
local credits = 0
if credit_count > 0 and (room or not bans or not count) then credits, standing = credit_balances(9, 18, credit_count, cost) end
if credits > 0 and (room or count) then return answer(credits, 0, 0) end
if room then
  if count then
    local function add(key, ttl)
      local used = redis.call('INCRBY', key, cost)
      if used == cost then redis.call('PEXPIRE', key, ttl) end
      return used
    end
    minute_used = add(KEYS[1], ARGV[6])
    day_used = add(KEYS[2], ARGV[7])
    shared_minute = add(KEYS[6], ARGV[6])
    shared_day = add(KEYS[7], ARGV[7])
    spend_credits(9, #standing / 2, cost, standing)
  end
  return answer(1, 0, take_slots())
end
if not count then return answer(0, 0, 0) end
if own_room and bans then return answer(0, tonumber(redis.call('GET', KEYS[3]) or '0'), 0) end
local refused = redis.call('INCR', KEYS[3])
if refused == 1 then redis.call('PEXPIRE', KEYS[3], ARGV[6]) end
if not bans then
  spend_credits(9, #standing / 2, cost, standing)
  return answer(0, refused, take_slots())
end
if refused > tonumber(ARGV[4]) then
  local banned_until = now + tonumber(ARGV[5])
  redis.call('SET', KEYS[4], banned_until, 'PX', tonumber(ARGV[5]) + ${DAY_MS})
  redis.call('DEL', KEYS[3])
  return answer(3, banned_until, 0)
end
return answer(0, refused, 0)
`;

/**
 * Takes a request's cost (ARGV[1]) back from each count (KEYS: minute, day, and a customer's minute
 * and day) that still holds it, down to 0 at most, then from each balance of credits it spent
 * (the last KEYS, one per further ARGV: the version it was spent in) still in that version.
 */
const REFUND = `
local cost = tonumber(ARGV[1])
local counts = #KEYS - (#ARGV - 1)
for i = 1, counts do
  local used = tonumber(redis.call('GET', KEYS[i]) or '0')
  if used > 0 then redis.call('DECRBY', KEYS[i], math.min(used, cost)) end
end
for i = 2, #ARGV do
  local key = KEYS[counts + i - 1]
  local stored = redis.call('HMGET', key, 'v', 's')
  if stored[1] == ARGV[i] then redis.call('HINCRBY', key, 's', -math.min(tonumber(stored[2]), cost)) end
end
`;

declare module 'ioredis' {
  interface RedisCommander {
    decideRateLimit(...args: Array<string | number>): Promise<DecideResult>;
    decideSharedRateLimit(...args: Array<string | number>): Promise<DecideSharedResult>;
    /** KEYS and ARGV as REFUND takes them, after the number of KEYS. */
    refundRateLimit(...args: Array<string | number>): Promise<null>;
  }
}

/** DECIDE's answer: outcome, minute used, day used, banned until or refusals, slot taken, then each balance's remaining (null: unseeded) and version. */
export type DecideResult = [number, number, number, number, number, ...Array<number | null>];

/** DECIDE_SHARED's answer: DECIDE's five, then the customer's minute used and day used, then the balances as DECIDE's. */
export type DecideSharedResult = [number, number, number, number, number, number, number, ...Array<number | null>];

/** DECIDE's first result: 0 when limited, else one of these (BAN_STARTED: banned by this very request; BUSY: every slot taken). */
export const ALLOWED = 1;
export const BANNED = 2;
export const BAN_STARTED = 3;
export const BUSY = 4;
export const CREDITS_EXHAUSTED = 5;
export const UNSEEDED = 6;

/**
 * Makes the scripts commands of the client: decideRateLimit, decideSharedRateLimit and
 * refundRateLimit, each called with its number of KEYS first (a request's balances of credits add
 * KEYS of their own).
 */
export function defineScripts(redis: Redis | Cluster) {
  redis.defineCommand('decideRateLimit', { lua: DECIDE });
  redis.defineCommand('decideSharedRateLimit', { lua: DECIDE_SHARED });
  redis.defineCommand('refundRateLimit', { lua: REFUND });
}
