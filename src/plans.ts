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

export const isPlan = (value: string): value is Plan => (PLANS as readonly string[]).includes(value);
