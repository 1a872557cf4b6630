import { MAX_WINDOWS, normalizeLimits, repeatedName, type LimitWindow, type Limits, type RateWindow } from './limits.js';
import { LimitBelowCostError, RepeatedWindowError, TooManyWindowsError } from './errors.js';

/**
 * What a key's and a customer's own windows have to hold: names unique, each window the dearest
 * operation's cost. The plans themselves are data (the plans table, migrations/019), read where
 * a key needs its plan's windows.
 */

/** The limit of the window of this name; null when there is none (or no windows). */
export const limitOf = (windows: Limits | null | undefined, name: string): number | null =>
  windows?.find((window) => window.name === name)?.limit ?? null;

/** The dearest operation by RATE_LIMIT_COSTS, and its cost (0 with no costs). */
export function dearest(costs: Record<string, number>): { operation: string; cost: number } {
  const [operation, cost] = Object.entries(costs).reduce((most, priced) => (priced[1] > most[1] ? priced : most), ['', 0]);
  return { operation, cost };
}

/** A LimitBelowCostError naming `field` when `limit` is below the dearest operation's cost: a key with it could never call that. */
export function checkCostFits(limit: number, costs: Record<string, number>, field: string): void {
  const { operation, cost } = dearest(costs);
  if (limit < cost) throw Object.assign(new LimitBelowCostError(limit, cost, operation), { field });
}

/**
 * A list of windows as given (the admin API's Limits, or a customer's), checked: a RepeatedWindowError
 * naming `${field}/<i>/name` for a name given twice, a LimitBelowCostError naming `${field}/<i>/limit`
 * for a window below the dearest cost. In the limiter's form (normalizeLimits): shortest first.
 */
export function checkedWindows(windows: readonly LimitWindow[], costs: Record<string, number>, field = 'limits'): Limits {
  const repeated = repeatedName(windows);
  if (repeated !== undefined) {
    const index = windows.findLastIndex((window) => window.name === repeated);
    throw Object.assign(new RepeatedWindowError(repeated), { field: `${field}/${index}/name` });
  }
  windows.forEach((window, index) => checkCostFits(window.limit, costs, `${field}/${index}/limit`));
  return normalizeLimits(windows);
}

/** The short form's windows: a fixed minute and a fixed day, so named. */
const SHORT_FORM = { perMinute: { name: 'minute', windowSeconds: 60 }, perDay: { name: 'day', windowSeconds: 86_400 } } as const;

/**
 * `windows` with the short form applied: perMinute and perDay replace the limit and length of the
 * windows named minute and day (fixed ones of 60 s and 86400 s), or add them. Each given must fit
 * the dearest cost (a LimitBelowCostError naming `${prefix}perMinute`); a TooManyWindowsError when
 * one added makes more than 5.
 */
export function withShortForm(
  windows: Limits,
  given: { perMinute?: number; perDay?: number },
  costs: Record<string, number>,
  prefix = '',
): Limits {
  let result: RateWindow[] = [...windows];
  for (const field of ['perMinute', 'perDay'] as const) {
    const limit = given[field];
    if (limit === undefined) continue;
    checkCostFits(limit, costs, `${prefix}${field}`);
    const { name, windowSeconds } = SHORT_FORM[field];
    result = [...result.filter((window) => window.name !== name), { name, limit, windowSeconds, algorithm: 'fixed' }];
    if (result.length > MAX_WINDOWS) throw Object.assign(new TooManyWindowsError(result.length), { field: `${prefix}${field}` });
  }
  return normalizeLimits(result);
}

/** Whether two lists of windows (or nulls) are the same, window for window. */
export const sameWindows = (a: Limits | null, b: Limits | null): boolean =>
  a === b ||
  (a !== null &&
    b !== null &&
    a.length === b.length &&
    a.every(
      (window, i) =>
        window.name === b[i]!.name &&
        window.limit === b[i]!.limit &&
        window.windowSeconds === b[i]!.windowSeconds &&
        window.algorithm === b[i]!.algorithm,
    ));
