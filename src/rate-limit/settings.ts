import { Type } from '@sinclair/typebox';
import type { PlanPolicy } from '../plans/ports.js';
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
    pattern: '^([a-z][a-z0-9_-]*(,[a-z][a-z0-9_-]*)*)?$',
    examples: ['free,pro'],
    description:
      "Plans in shadow mode, whatever their rows say (a plan's `shadow` in the admin API is the place to set it now): past its limits a key of these plans is served, with the headers of a refusal, counted in `rate_limit_shadow_refusals_total` and logged once a minute; never refused or banned. The admin API's `enforceLimits: false` does the same for one key.",
  }),
  RATE_LIMIT_CONCURRENCY: Type.String({
    default: '',
    pattern: '^(off|([a-z][a-z0-9_-]*=[0-9]+(,[a-z][a-z0-9_-]*=[0-9]+)*)?)$',
    examples: ['free=2,pro=10', 'off'],
    description:
      "Requests a key may have in flight at once, per plan, as `plan=requests` pairs (1 to 100000), deciding every plan's as it did before plans were rows (a plan not named has none; `off`: none has one), over the rows; unset (the default), the plans' rows decide (the seed's: free 5, pro 20, business 50, enterprise 100; a plan's `concurrency` in the admin API is the place to set it now). The admin API's `concurrency` sets one key's own. Over it: 429 `concurrency_limited`, costing no quota.",
  }),
};

/** The most one operation may cost: RATE_LIMIT_COSTS's bound, far above what any plan would price a request at. */
const MAX_OPERATION_COST = 1000;
/** RATE_LIMIT_CONCURRENCY's bound, as the api_keys column's (migrations/012). */
const MAX_CONCURRENCY = 100_000;

/**
 * The RATE_LIMIT_* settings that name operations and plans, as values; the rate limiter checks the names
 * against its plans (src/plans/plugin.ts) and operations (checkCostsFitPlans, checkCostsServed below).
 */
export function rateLimitSettings(settings: SettingValues<typeof rateLimits>) {
  const concurrency = settings.RATE_LIMIT_CONCURRENCY;
  return {
    rateLimitCosts: namedNumbers('RATE_LIMIT_COSTS', settings.RATE_LIMIT_COSTS, { max: MAX_OPERATION_COST, what: 'a cost' }),
    rateLimitShadowPlans: settings.RATE_LIMIT_SHADOW_PLANS.split(',').filter(Boolean),
    // Unset: the plans' rows decide. Set, it decides every plan, as before plans were rows: off or unnamed, none.
    rateLimitConcurrency:
      concurrency === ''
        ? null
        : namedNumbers('RATE_LIMIT_CONCURRENCY', concurrency === 'off' ? '' : concurrency, { max: MAX_CONCURRENCY, what: 'a limit' }),
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

/** At start: no operation costs more than a window of a plan allows (its keys could never call it). */
export function checkCostsFitPlans(plans: readonly PlanPolicy[], costs: Record<string, number>): void {
  for (const { name, limits } of plans) {
    for (const window of limits ?? []) {
      const dearer = Object.entries(costs).find(([, cost]) => cost > window.limit);
      if (dearer) {
        throw new InvalidSettingError(
          'RATE_LIMIT_COSTS',
          `${dearer[0]} costs ${dearer[1]}, more than the ${name} plan's ${window.limit} a ${window.name}; its keys could never call it`,
        );
      }
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
