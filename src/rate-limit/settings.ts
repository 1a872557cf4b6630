import { Type } from '@sinclair/typebox';
import { limitBelowCost, PLAN_LIMITS, PLANS } from '../api-keys/plans.js';
import { invalidSetting, InvalidSettingError } from '../platform/config/errors.js';
import type { SettingValues } from '../platform/config/parsers.js';

// The RATE_LIMIT_* settings, each description the setting's documentation (src/config/schema.ts), parsed and
// checked in their syntax and bounds when the configuration loads, then against what only the service knows:
// its plans and the operations it serves.

/** Bans, anonymous callers, costs, shadow mode, concurrency. */
export const rateLimits = {
  RATE_LIMIT_BAN_THRESHOLD: Type.Integer({
    minimum: 1,
    default: 30,
    description: 'A caller refused more often than this within one minute window is banned.',
  }),
  RATE_LIMIT_BAN_SECONDS: Type.Integer({ minimum: 1, default: 900, description: 'How long a ban lasts.' }),
  RATE_LIMIT_IPV6_PREFIX: Type.Integer({
    minimum: 1,
    maximum: 128,
    default: 64,
    description: 'Callers without a valid key are counted per IPv6 network of this many leading bits (IPv4: per address).',
  }),
  RATE_LIMIT_COSTS: Type.String({
    default: '',
    pattern: '^([A-Za-z]+=[0-9]+(,[A-Za-z]+=[0-9]+)*)?$',
    examples: ['createPet=5,listPets=1'],
    description:
      "The units an operation spends of a key's quota in both windows, as `operationId=units` pairs (1 to 1000); every other " +
      'operation costs 1, so unset the limits count requests. A request with fewer units left than its cost is refused. ' +
      "A cost above a plan's per-minute or per-day limit stops the start (its keys could never call the operation).",
  }),
  RATE_LIMIT_SHADOW_PLANS: Type.String({
    default: '',
    pattern: '^([a-z]+(,[a-z]+)*)?$',
    examples: ['free,pro'],
    description:
      "Plans in shadow mode: past its limits a key of these plans is served, with the headers of a refusal, counted in `rate_limit_shadow_refusals_total` and logged once a minute; never refused or banned. The admin API's `enforceLimits: false` does the same for one key. Where it names a plan it wins over the plan's row (`shadow`, see Plans below).",
  }),
  RATE_LIMIT_CONCURRENCY: Type.String({
    default: 'free=5,pro=20,business=50,enterprise=100',
    pattern: '^(off|[a-z]+=[0-9]+(,[a-z]+=[0-9]+)*)$',
    examples: ['free=2,pro=10', 'off'],
    description:
      "Requests a key may have in flight at once, per plan, as `plan=requests` pairs (1 to 100000); a plan not named has no such limit, `off` none. The admin API's `concurrency` sets one key's own. Over it: 429 `concurrency_limited`, costing no quota. Where it names a plan it wins over the plan's row (`concurrency`, see Plans below).",
  }),
};

/** The most one operation may cost: RATE_LIMIT_COSTS's bound, far above what any plan would price a request at. */
const MAX_OPERATION_COST = 1000;
/** RATE_LIMIT_CONCURRENCY's bound, as the api_keys column's (migrations/012). */
const MAX_CONCURRENCY = 100_000;

/**
 * The RATE_LIMIT_* settings that name operations and plans, as values; the rate limiter checks the names
 * against its plans and operations (checkPlanSettings, checkCostsServed below).
 */
export function rateLimitSettings(settings: SettingValues<typeof rateLimits>) {
  const concurrency = settings.RATE_LIMIT_CONCURRENCY;
  return {
    rateLimitCosts: namedNumbers('RATE_LIMIT_COSTS', settings.RATE_LIMIT_COSTS, { max: MAX_OPERATION_COST, what: 'a cost' }),
    rateLimitShadowPlans: settings.RATE_LIMIT_SHADOW_PLANS.split(',').filter(Boolean),
    rateLimitConcurrency:
      concurrency === 'off' ? {} : namedNumbers('RATE_LIMIT_CONCURRENCY', concurrency, { max: MAX_CONCURRENCY, what: 'a limit' }),
  };
}

/** `name=number,...` pairs (their syntax checked by the schema's pattern), each name once, each number from 1 to `max`. */
function namedNumbers(setting: string, value: string, { max, what }: { max: number; what: string }): Record<string, number> {
  const numbers: Record<string, number> = {};
  for (const pair of value.split(',').filter(Boolean)) {
    const [name, digits] = pair.split('=') as [string, string];
    if (name in numbers) throw invalidSetting(setting, value, `${name} is named twice`);
    const number = Number(digits);
    if (number < 1 || number > max) throw invalidSetting(setting, value, `${name} is ${digits}; ${what} is from 1 to ${max}`);
    numbers[name] = number;
  }
  return numbers;
}

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
