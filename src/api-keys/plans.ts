import { LimitsError } from '../platform/domain-errors.js';

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
 * its table's and accepts none. Undefined for those; throws a LimitsError otherwise.
 */
export function ownLimits(plan: Plan, perMinute: number | undefined, perDay: number | undefined): Limits | undefined {
  if (plan !== 'enterprise') {
    if (perMinute === undefined && perDay === undefined) return undefined;
    throw new LimitsError(`per-minute and per-day limits are for enterprise keys; the ${plan} plan has fixed limits`);
  }
  if (perMinute === undefined || perDay === undefined) throw new LimitsError('enterprise keys need per-minute and per-day limits');
  return { perMinute, perDay };
}
