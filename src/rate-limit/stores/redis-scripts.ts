import type { Cluster, Redis } from 'ioredis';
import { creditArgs } from './redis-credits.js';
import { DAY_MS, MINUTE_MS } from '../../platform/time.js';
import { CREDITS_TTL_MS, type CreditClaim, type WindowCount } from './store.js';

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

/** The KEYS of a subject, by name, in the order the decision scripts take them: its counters follow (see decisionArgs). */
const SUBJECT_KEYS = ['refusals', 'ban', 'slots'] as const;
/** DECIDE_SHARED's further KEYS: its customer's. */
const CUSTOMER_KEYS = ['customerSlots'] as const;
/** The ARGV both decision scripts take first, by name, in their order. */
const DECISION_ARGS = ['now', 'banThreshold', 'banMs', 'cost', 'bans', 'count', 'slots', 'lease', 'leaseMs'] as const;
/** DECIDE_SHARED's further ARGV: its customer's slots. */
const CUSTOMER_ARGS = ['customerSlots'] as const;
/** The ARGV of one window, by name, in their order (see WINDOWS). */
const WINDOW_ARGS = ['limit', 'windowMs', 'elapsed', 'sliding', 'current', 'previous'] as const;

/** Each name's position, from 1 as Lua counts KEYS and ARGV. */
const positions = <Name extends string>(names: readonly Name[]) =>
  Object.fromEntries(names.map((name, i) => [name, i + 1])) as Record<Name, number>;
/** Where the decision scripts read each of their KEYS and ARGV: the Lua below is written from these, decisionArgs lays them out. */
const KEY = positions([...SUBJECT_KEYS, ...CUSTOMER_KEYS]);
const ARG = positions([...DECISION_ARGS, ...CUSTOMER_ARGS]);
/** A window's ARGV, from 0 after its first. */
const W = Object.fromEntries(WINDOW_ARGS.map((name, i) => [name, i])) as Record<(typeof WINDOW_ARGS)[number], number>;

/**
 * The windows of a subject (and of a customer), read and counted by one loop: a list of them at
 * ARGV[at] (their number, then six ARGV each, see WINDOW_ARGS: limit, length (ms), ms elapsed in
 * its current fixed window, sliding (1 or 0), the KEYS index of its current counter and of its
 * previous one (a sliding window's; 0 for a fixed one)). The counters (KEYS[first_counter] to
 * the last before the balances') are read in one MGET into `counts`, by KEYS index; windows of
 * the same length share theirs, and each is counted once (`counted_keys`). A sliding window's
 * count is its current counter plus the previous one's share still inside the last window
 * (slidingCount in store.ts, the same expression).
 */
const WINDOWS = `
local counts, counted_keys = {[0] = 0}, {}
local function read_counts(first, last)
  local stored = redis.call('MGET', unpack(KEYS, first, last))
  for i = first, last do counts[i] = tonumber(stored[i - first + 1] or '0') end
end
local function windows_at(at)
  local list = {}
  for i = 1, tonumber(ARGV[at]) do
    local a = at + 1 + ${WINDOW_ARGS.length} * (i - 1)
    list[i] = {
      limit = tonumber(ARGV[a + ${W.limit}]), ms = tonumber(ARGV[a + ${W.windowMs}]), elapsed = tonumber(ARGV[a + ${W.elapsed}]),
      sliding = ARGV[a + ${W.sliding}] == '1', current = tonumber(ARGV[a + ${W.current}]), previous = tonumber(ARGV[a + ${W.previous}]),
    }
  end
  return list, at + 1 + ${WINDOW_ARGS.length} * #list
end
local function has_room(list, cost)
  for _, w in ipairs(list) do
    local used = counts[w.current]
    if w.sliding then used = used + math.ceil(counts[w.previous] * (w.ms - w.elapsed) / w.ms) end
    if used + cost > w.limit then return false end
  end
  return true
end
local function count_in(list, cost)
  for _, w in ipairs(list) do
    if not counted_keys[w.current] then
      counted_keys[w.current] = true
      counts[w.current] = redis.call('INCRBY', KEYS[w.current], cost)
      if counts[w.current] == cost then redis.call('PEXPIRE', KEYS[w.current], 2 * w.ms) end
    end
  end
end
local function counts_of(list, result)
  for _, w in ipairs(list) do
    result[#result + 1] = counts[w.current]
    result[#result + 1] = counts[w.previous]
  end
end
`;

/**
 * The whole decision in one atomic round trip: the leases given back, the slot, the ban, every
 * window, the refusal count; for a customer's key (`customer`, set by DECIDE_SHARED) the
 * customer's windows and slots with the key's. KEYS (see KEY): minute refusals, ban, leases (a
 * sorted set of the subject's slots in flight, by expiry), of DECIDE_SHARED the customer's leases,
 * then the counters of both (see WINDOWS), then one per balance of credits claimed. ARGV (see ARG):
 * now (ms), ban threshold, ban duration (ms), cost (units), bans (1, or 0: no ban holds or starts,
 * and the refusals are counted apart), count (1, or 0: decides as a check, counting nothing), slots
 * (the limit; 0 takes none), lease, lease length (ms), of DECIDE_SHARED the customer's slots (0:
 * none), the subject's windows (see WINDOWS), of DECIDE_SHARED the customer's, the number of
 * balances claimed and four ARGV each (see CREDITS), the number of leases given back from the
 * subject's slots, those leases, then those given back from the customer's.
 * Returns [outcome, banned until or refusals, slot taken (1 or 0)], then each window's current and
 * previous counter (the subject's, then of DECIDE_SHARED the customer's), then each balance's
 * remaining and version when they were decided: outcome 1 allowed, 0 limited (with the refusals
 * this minute), 2 banned, 3 banned by this request, 4 every slot taken (with the ban's end, if any:
 * a check's standing; the third 1 when the customer's were), 5 a balance has fewer units than the
 * cost, 6 a balance unseeded (5 and 6 count nothing; windows refuse first). Allowed only when every
 * window of the key and of its customer has room, counted in all or none; a lease takes both
 * subjects' slots or none. The ban and refusals are the key's: a refusal by the customer's windows
 * alone counts towards no ban (in shadow mode it is counted apart, as any). The ban holds its end
 * time, so an injected clock works. A slot is taken, the expired leases dropped first, only by a
 * request served: allowed, or limited in shadow mode. A lease given back is expired and dropped
 * with them, not ZREMed: INFO commandstats counts a script's commands too, and its ZREMs then count
 * the releases sent on their own alone (see docs/decisions/redis-one-round-trip.md).
 */
const DECISION = `
local now = tonumber(ARGV[${ARG.now}])
local bans = ARGV[${ARG.bans}] == '1'
local count = ARGV[${ARG.count}] == '1'
local slots = tonumber(ARGV[${ARG.slots}])
local cost = tonumber(ARGV[${ARG.cost}])
local own, credit_count_at = windows_at(windows_arg)
if customer then customer.windows, credit_count_at = windows_at(credit_count_at) end
local credit_count = tonumber(ARGV[credit_count_at])
local first_credit_key = #KEYS - credit_count + 1
local first_release = credit_count_at + 2 + 4 * credit_count
local own_releases = first_release - 1 + tonumber(ARGV[first_release - 1])
local function give_back(key, first, last, limit)
  for i = first, last do redis.call('ZADD', key, 'XX', 0, ARGV[i]) end
  if limit > 0 or last >= first then redis.call('ZREMRANGEBYSCORE', key, '-inf', now) end
end
give_back(KEYS[${KEY.slots}], first_release, own_releases, slots)
if customer then give_back(customer.slots, own_releases + 1, #ARGV, customer.slot_limit) end
local ban_end = tonumber(redis.call('GET', KEYS[${KEY.ban}]) or '0')
read_counts(first_counter, first_credit_key - 1)
local standing = {}
local function answer(outcome, last, taken)
  local result = {outcome, last, taken}
  counts_of(own, result)
  if customer then counts_of(customer.windows, result) end
  local credits_at = #result
  for i = 1, 2 * credit_count do result[credits_at + i] = standing[i] end
  return result
end
if customer and customer.slot_limit > 0 and redis.call('ZCARD', customer.slots) >= customer.slot_limit then return answer(4, ban_end, 1) end
if slots > 0 and redis.call('ZCARD', KEYS[${KEY.slots}]) >= slots then return answer(4, ban_end, 0) end
local function take_slot(key, limit)
  if limit <= 0 then return 0 end
  redis.call('ZADD', key, now + tonumber(ARGV[${ARG.leaseMs}]), ARGV[${ARG.lease}])
  redis.call('PEXPIRE', key, ARGV[${ARG.leaseMs}])
  return 1
end
local function take_slots()
  local taken = take_slot(KEYS[${KEY.slots}], slots)
  if customer and take_slot(customer.slots, customer.slot_limit) == 1 then taken = 1 end
  return taken
end
if (bans or not count) and ban_end > now then return answer(2, ban_end, 0) end
local own_room = has_room(own, cost)
local room = own_room and (not customer or has_room(customer.windows, cost))
local credits = 0
if credit_count > 0 and (room or not bans or not count) then
  credits, standing = credit_balances(first_credit_key, credit_count_at + 1, credit_count, cost)
end
if credits > 0 and (room or count) then return answer(credits, 0, 0) end
if room then
  if count then
    count_in(own, cost)
    if customer then count_in(customer.windows, cost) end
    spend_credits(first_credit_key, #standing / 2, cost, standing)
  end
  return answer(1, 0, take_slots())
end
if not count then return answer(0, 0, 0) end
if own_room and bans then return answer(0, tonumber(redis.call('GET', KEYS[${KEY.refusals}]) or '0'), 0) end
local refused = redis.call('INCR', KEYS[${KEY.refusals}])
if refused == 1 then redis.call('PEXPIRE', KEYS[${KEY.refusals}], ${2 * MINUTE_MS}) end
if not bans then
  spend_credits(first_credit_key, #standing / 2, cost, standing)
  return answer(0, refused, take_slots())
end
if refused > tonumber(ARGV[${ARG.banThreshold}]) then
  local banned_until = now + tonumber(ARGV[${ARG.banMs}])
  redis.call('SET', KEYS[${KEY.ban}], banned_until, 'PX', tonumber(ARGV[${ARG.banMs}]) + ${DAY_MS})
  redis.call('DEL', KEYS[${KEY.refusals}])
  return answer(3, banned_until, 0)
end
return answer(0, refused, 0)
`;

/** DECISION for a subject alone: its counters follow its own KEYS, its windows its own ARGV, and it has no customer. */
const DECIDE = `${CREDITS}${WINDOWS}
local first_counter, windows_arg = ${SUBJECT_KEYS.length + 1}, ${DECISION_ARGS.length + 1}
local customer = false
${DECISION}`;

/**
 * DECISION for a request of a customer's key, its customer's KEYS and ARGV after the key's (one
 * hash tag for all: see keySubject). A script of its own, so that keys without a customer pass none.
 */
const DECIDE_SHARED = `${CREDITS}${WINDOWS}
local first_counter, windows_arg = ${KEY.customerSlots + 1}, ${ARG.customerSlots + 1}
local customer = { slots = KEYS[${KEY.customerSlots}], slot_limit = tonumber(ARGV[${ARG.customerSlots}]) }
${DECISION}`;

/**
 * Takes a request's cost (ARGV[1]) back from each counter (KEYS: each distinct current counter of
 * the subject's windows, and of a customer's) that still holds it, down to 0 at most, then from each balance of credits it spent
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
  local back = stored[1] == ARGV[i] and math.min(tonumber(stored[2]), cost) or 0
  if back > 0 then redis.call('HINCRBY', key, 's', -back) end
end
`;

declare module 'ioredis' {
  interface RedisCommander {
    decideRateLimit(...args: Array<string | number>): Promise<DecideResult>;
    decideSharedRateLimit(...args: Array<string | number>): Promise<DecideResult>;
    /** KEYS and ARGV as REFUND takes them, after the number of KEYS (scriptArgs). */
    refundRateLimit(...args: Array<string | number>): Promise<null>;
  }
}

/**
 * Both decision scripts' answer: outcome, banned until or refusals, slot taken, then each window's
 * current and previous counter (the subject's, then the customer's), then each balance's remaining
 * (null: unseeded) and version.
 */
export type DecideResult = [number, number, number, ...Array<number | null>];

/** Where the windows' counters start in the answer (from 0). */
export const COUNTS_AT = 3;
/** Where the counters of this many windows end in an answer: the customer's windows' counters follow the subject's there, the balances' standings all of them. */
export const afterCounts = (windows: number) => COUNTS_AT + 2 * windows;

/** The counts of `windows` windows in an answer, from `from` on: each one's current and previous counter. */
export const countsAt = (decided: readonly (number | null)[], from: number, windows: number): WindowCount[] =>
  Array.from({ length: windows }, (_, i) => ({ current: Number(decided[from + 2 * i]), previous: Number(decided[from + 2 * i + 1]) }));

type Named<Names extends readonly string[], Value> = Record<Names[number], Value>;

/** One window as the scripts take it: its counters by key (decisionArgs gives each distinct key one KEYS index). */
export interface WindowCall {
  limit: number;
  windowMs: number;
  /** Ms since the start of its current fixed window. */
  elapsed: number;
  sliding: boolean;
  current: string;
  /** A sliding window's previous fixed window's counter; none for a fixed one. */
  previous?: string;
}

/** A decision as its script takes it: each of its KEYS and ARGV by name (see KEY and ARG), then the lists that follow them. */
export interface DecisionCall {
  keys: Named<typeof SUBJECT_KEYS, string>;
  args: Named<typeof DECISION_ARGS, string | number>;
  windows: readonly WindowCall[];
  /** A customer's key's: its customer's KEYS, ARGV and windows, for DECIDE_SHARED. */
  customer?: { keys: Named<typeof CUSTOMER_KEYS, string>; args: Named<typeof CUSTOMER_ARGS, number>; windows: readonly WindowCall[] };
  /** The balances claimed (see CREDITS), and the key each is kept at. */
  credits: readonly CreditClaim[];
  creditKeys: readonly string[];
  /** The leases given back from the subject's slots, then from its customer's. */
  releases: readonly string[];
  customerReleases: readonly string[];
}

/** A script's call as ioredis takes it: the number of KEYS, the KEYS, then the ARGV. */
export const scriptArgs = (keys: readonly string[], args: ReadonlyArray<string | number>): Array<string | number> => [
  keys.length,
  ...keys,
  ...args,
];

/**
 * The windows' ARGV (see WINDOWS), each counter key given a KEYS index from `first` once (windows
 * of the same length share theirs), the distinct keys pushed on `counters`.
 */
function windowArgs(windows: readonly WindowCall[], first: number, counters: string[]): number[] {
  const indexOf = (key: string | undefined) => {
    if (key === undefined) return 0;
    if (!counters.includes(key)) counters.push(key);
    return first + counters.indexOf(key);
  };
  const args = windows.map(({ limit, windowMs, elapsed, sliding, current, previous }) => {
    const named: Record<(typeof WINDOW_ARGS)[number], number> = {
      limit,
      windowMs,
      elapsed,
      sliding: sliding ? 1 : 0,
      current: indexOf(current),
      previous: indexOf(previous),
    };
    return WINDOW_ARGS.map((name) => named[name]);
  });
  return [windows.length, ...args.flat()];
}

/** DECIDE's call (DECIDE_SHARED's, with a customer): its KEYS and ARGV each at its position, then the windows, the balances and the leases. */
export function decisionArgs({ keys, args, windows, customer, credits, creditKeys, releases, customerReleases }: DecisionCall) {
  const named: string[] = SUBJECT_KEYS.map((name) => keys[name]);
  const values: Array<string | number> = DECISION_ARGS.map((name) => args[name]);
  if (customer) {
    named.push(...CUSTOMER_KEYS.map((name) => customer.keys[name]));
    values.push(...CUSTOMER_ARGS.map((name) => customer.args[name]));
  }
  const counters: string[] = [];
  values.push(...windowArgs(windows, named.length + 1, counters));
  if (customer) values.push(...windowArgs(customer.windows, named.length + 1, counters));
  const allKeys = [...named, ...counters, ...creditKeys];
  return scriptArgs(allKeys, [...values, ...creditArgs(credits), releases.length, ...releases, ...customerReleases]);
}

/** DECIDE's first result: 0 when limited, else one of these (BAN_STARTED: banned by this very request; BUSY: every slot taken). */
export const ALLOWED = 1;
export const BANNED = 2;
export const BAN_STARTED = 3;
export const BUSY = 4;
export const CREDITS_EXHAUSTED = 5;
export const UNSEEDED = 6;

/**
 * Makes the scripts commands of the client: decideRateLimit, decideSharedRateLimit and
 * refundRateLimit, each called with its number of KEYS first (scriptArgs; a request's balances of
 * credits add KEYS of their own).
 */
export function defineScripts(redis: Redis | Cluster) {
  redis.defineCommand('decideRateLimit', { lua: DECIDE });
  redis.defineCommand('decideSharedRateLimit', { lua: DECIDE_SHARED });
  redis.defineCommand('refundRateLimit', { lua: REFUND });
}
