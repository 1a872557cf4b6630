import { limitBelowCost, PLAN_LIMITS, PLANS } from '../api-keys/plans.js';
import { InvalidSettingError } from '../platform/config/errors.js';

// The RATE_LIMIT_* settings checked against what only the service knows: its plans and the operations it serves.
// Their syntax and bounds are checked with every other setting's (src/platform/config/), which knows no feature.

/** The parsed RATE_LIMIT_* settings that name plans and operations (the limiter's options). */
interface NamingSettings {
  /** RATE_LIMIT_COSTS: units by operationId. */
  costs: Record<string, number>;
  /** RATE_LIMIT_SHADOW_PLANS. */
  shadowPlans: string[];
  /** RATE_LIMIT_CONCURRENCY: requests in flight by plan. */
  concurrency: Record<string, number>;
}

/** At start: each plan named is one, and no operation costs more than a plan's limit (its keys could never call it). */
export function checkPlanSettings(settings: NamingSettings): void {
  for (const [setting, plans] of [
    ['RATE_LIMIT_SHADOW_PLANS', settings.shadowPlans],
    ['RATE_LIMIT_CONCURRENCY', Object.keys(settings.concurrency)],
  ] as const) {
    const unknown = plans.filter((plan) => !(PLANS as readonly string[]).includes(plan));
    if (unknown.length > 0) throw new InvalidSettingError(setting, `no plan ${unknown.join(', ')}; the plans are ${PLANS.join(', ')}`);
  }
  for (const [plan, limits] of Object.entries(PLAN_LIMITS)) {
    const below = limitBelowCost(limits, settings.costs);
    if (below) {
      const window = below.field === 'perMinute' ? 'minute' : 'day';
      throw new InvalidSettingError(
        'RATE_LIMIT_COSTS',
        `${below.operation} costs ${below.cost}, more than the ${plan} plan's ${below.limit} a ${window}; its keys could never call it`,
      );
    }
  }
}

/** Once a listener's routes are added: each operation RATE_LIMIT_COSTS prices is one of them (src/v1/pipeline.ts). */
export function checkCostsServed(priced: string[], operations: ReadonlySet<string>): void {
  const unserved = priced.filter((operation) => !operations.has(operation));
  if (unserved.length > 0) {
    throw new InvalidSettingError(
      'RATE_LIMIT_COSTS',
      `no operation ${unserved.join(', ')} here; the operations are ${[...operations].join(', ')}`,
    );
  }
}
