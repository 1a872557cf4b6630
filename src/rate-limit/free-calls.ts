import { minuteAndDay } from '../plans/limits.js';

/**
 * What a free operation spends of the key's windows (its route's `config.cost`): nothing, so the
 * pipeline only checks them, and a ban. Such an operation tells the caller about itself (the quota
 * lookup, GET /v1/rate_limit; the usage read, GET /v1/usage) and has a limit of its own per key
 * instead, spent by its handler (app.rateLimit.spendFreeCall), so that polling it costs the service little.
 */
export const FREE_CALL_COST = 0;

/** Each free operation's own limit per key quota: counted apart from the key's windows and from the other free operations', banning no one. */
export const FREE_CALLS = minuteAndDay(60, 60 * 24 * 60);

/** The calls of a free operation a key may make each minute, as its documentation states it. */
export const FREE_CALLS_PER_MINUTE = FREE_CALLS[0]!.limit;

/** A free operation as its limit knows it: its operationId (the subject it counts in) and its route, which its 429 names. */
export interface FreeCall {
  operationId: string;
  route: string;
}
