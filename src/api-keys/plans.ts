import { FixedLimitsError, LimitBelowCostError, MissingLimitsError } from './errors.js';

/** The plans of the interface's Limits section: the one table of them in the code. */
export const PLANS = ['free', 'pro', 'business', 'enterprise'] as const;
export type Plan = (typeof PLANS)[number];

export interface Limits {
  perMinute: number;
  perDay: number;
}

/** Enterprise limits are "custom": each enterprise key carries its own. */
export const PLAN_LIMITS: Record<Exclude<Plan, 'enterprise'>, Limits> = {
  free: { perMinute: 60, perDay: 1_000 },
  pro: { perMinute: 300, perDay: 10_000 },
  business: { perMinute: 1_000, perDay: 100_000 },
};

/**
 * The limits a key of `plan` carries itself: an enterprise key needs both, every other plan takes
 * its table's and accepts none. Undefined for those; throws a FixedLimitsError or MissingLimitsError otherwise.
 */
export function ownLimits(plan: Plan, perMinute: number | undefined, perDay: number | undefined): Limits | undefined {
  if (plan !== 'enterprise') {
    if (perMinute === undefined && perDay === undefined) return undefined;
    throw new FixedLimitsError(plan);
  }
  if (perMinute === undefined || perDay === undefined) throw new MissingLimitsError();
  return { perMinute, perDay };
}

/** Which of a key's limits the dearest operation (by RATE_LIMIT_COSTS) costs more than: a key with them could never be admitted to it. */
export function limitBelowCost(limits: Limits, costs: Record<string, number>) {
  const [operation, cost] = Object.entries(costs).reduce((dearest, priced) => (priced[1] > dearest[1] ? priced : dearest), ['', 0]);
  const field = (['perMinute', 'perDay'] as const).find((name) => limits[name] < cost);
  return field && { field, limit: limits[field], operation, cost };
}

/** A LimitBelowCostError, its `field` the limit named, unless every operation's cost fits within the limits. */
export function checkCostsFit(limits: Limits, costs: Record<string, number>): void {
  const below = limitBelowCost(limits, costs);
  if (!below) return;
  const { field, limit, operation, cost } = below;
  throw Object.assign(new LimitBelowCostError(limit, cost, operation), { field });
}
