import { Type, type Static } from '@sinclair/typebox';
import { Nullable, Timestamp } from '../platform/schemas/common.js';
import { ALGORITHMS, Limits, LimitWindow } from './limits.js';

/** A plan's name (the plans table's check, migrations/019). */
export const PlanName = Type.String({
  pattern: '^[a-z][a-z0-9_-]{0,31}$',
  description: 'The plan’s name, unique: a lower-case letter, then up to 31 lower-case letters, digits, _ or -',
  'x-error-message': 'must be a lower-case letter then up to 31 lower-case letters, digits, _ or -',
});

/** The bound of the plans' concurrency column, as a key's (migrations/012, 019). */
const PlanConcurrency = Type.Integer({
  minimum: 1,
  maximum: 100_000,
  description: 'Requests a key of the plan may have in flight at once',
});

const ConcurrencyInput = Type.Union([PlanConcurrency, Type.Null()], {
  description: 'Requests a key of the plan may have in flight at once, 1 to 100000; null for no such limit',
  'x-error-message': 'must be an integer from 1 to 100000, or null',
});

const LimitsInput = Type.Union([Limits, Type.Null()], {
  description: `${Limits.description}; null for a plan whose keys each carry their own (as enterprise)`,
  'x-error-message': 'must be a list of 1 to 5 windows, or null',
});

const Shadow = Type.Boolean({
  description: 'True: past its limits a key of the plan is served, with the headers of a refusal (shadow mode); never refused or banned',
});

/** A window as the API shows it: its algorithm always given. */
const ShownWindow = Type.Object(
  { ...LimitWindow.properties, algorithm: Type.Union(ALGORITHMS.map((algorithm) => Type.Literal(algorithm))) },
  { title: 'PlanWindow', description: 'One named window of a plan, its algorithm filled in' },
);

export const Plan = Type.Object(
  {
    name: Type.String({ description: PlanName.description }),
    limits: Nullable(
      Type.Array(ShownWindow, { description: 'The plan’s windows, shortest first; null for a plan whose keys each carry their own' }),
    ),
    concurrency: Nullable({ ...PlanConcurrency, description: `${PlanConcurrency.description}; null for no such limit` }),
    shadow: Shadow,
    createdAt: Timestamp,
    updatedAt: Timestamp,
  },
  {
    title: 'Plan',
    description:
      'A plan: the limits of every key of it that carries none of its own. RATE_LIMIT_SHADOW_PLANS and RATE_LIMIT_CONCURRENCY, where set for it, override its shadow and concurrency',
  },
);
export type Plan = Static<typeof Plan>;

export const Plans = Type.Array(Plan, { title: 'Plans', description: 'Every plan, by name' });

export const NewPlan = Type.Object(
  {
    name: PlanName,
    limits: LimitsInput,
    concurrency: Type.Optional(ConcurrencyInput),
    shadow: Type.Optional(Shadow),
  },
  {
    title: 'NewPlan',
    description: 'A plan: its name and windows; no concurrency limit and no shadow mode unless given',
    additionalProperties: false,
    'x-error-message': 'must be a JSON object with name and limits, and concurrency and shadow if any',
  },
);
export type NewPlan = Static<typeof NewPlan>;

export const PlanPatch = Type.Object(
  {
    limits: Type.Optional(LimitsInput),
    concurrency: Type.Optional(ConcurrencyInput),
    shadow: Type.Optional(Shadow),
  },
  {
    title: 'PlanPatch',
    description:
      'Absent fields keep their value; limits null leaves each key of the plan to carry its own; concurrency null removes the limit',
    additionalProperties: false,
    minProperties: 1,
    'x-error-message': 'must be a JSON object with at least one of limits, concurrency, shadow',
  },
);
export type PlanPatch = Static<typeof PlanPatch>;

export const PlanParams = Type.Object({ name: PlanName });
