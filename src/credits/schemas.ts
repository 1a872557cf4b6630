import { Type, type Static } from '@sinclair/typebox';
import { Literals, Nullable, Timestamp } from '../platform/schemas/common.js';
import { REFILL_INTERVALS } from './refill.js';

/** The most one call sets or moves: far below 2^53, so every balance stays exact as a JSON number. */
export const MAX_AMOUNT = 1_000_000_000_000;

const Units = (description: string, minimum = 0) =>
  Type.Integer({
    minimum,
    maximum: MAX_AMOUNT,
    description,
    'x-error-message': `must be a whole number from ${minimum} to ${MAX_AMOUNT}`,
  });

const DayOfMonth = Type.Integer({
  minimum: 1,
  maximum: 31,
  description: 'Monthly only: the day of the month the refill is due (00:00 UTC), capped at the month’s last day; by default 1',
  'x-error-message': 'must be an integer from 1 to 31',
});

export const Refill = Type.Object(
  {
    interval: Literals(REFILL_INTERVALS, 'day: at every 00:00 UTC; month: at 00:00 UTC of dayOfMonth'),
    amount: Units('What remains after each refill: the balance is set to it, not added to'),
    dayOfMonth: Type.Optional(DayOfMonth),
  },
  {
    title: 'Refill',
    description: 'How the balance refills: remaining becomes amount at each refill',
    additionalProperties: false,
    'x-error-message': 'must be a JSON object with interval and amount, and dayOfMonth for a monthly refill if any',
  },
);

/** Credits as a create or change sets them; on a change, a set: spending starts again from remaining. */
export const CreditsInput = Type.Object(
  {
    remaining: Units('The balance of units the requests spend (each its operation’s cost, RATE_LIMIT_COSTS)'),
    refill: Type.Optional(Refill),
  },
  {
    title: 'CreditsInput',
    description: 'Prepaid credits: a balance of units, and how it refills if it does (no refill by default)',
    additionalProperties: false,
    'x-error-message': 'must be a JSON object with remaining, and refill if any',
  },
);

/** In a change: null removes the balance. */
export const CreditsChange = Type.Union([CreditsInput, Type.Null()], {
  description: `${CreditsInput.description}; a set (spending starts again from remaining); null removes the balance`,
  'x-error-message': 'must be a JSON object with remaining, and refill if any; or null',
});

export const Credits = Type.Object(
  {
    remaining: Type.Integer({
      description:
        'Units left, never below 0, as PostgreSQL records them: spending reaches the record in batches, so this lags the requests by up to about a second',
    }),
    refill: Nullable(Refill),
    refillAt: Nullable({ ...Timestamp, description: 'When the next refill is due; null without a refill' }),
  },
  { title: 'Credits', description: 'Prepaid credits: a balance of units the requests spend, and its refill' },
);
export type Credits = Static<typeof Credits>;

export const CREDIT_OPERATIONS = ['set', 'increment', 'decrement'] as const;
export type CreditOperation = (typeof CREDIT_OPERATIONS)[number];

export const CreditsOperation = Type.Object(
  {
    operation: Literals(
      CREDIT_OPERATIONS,
      'set: remaining becomes amount (spending starts again from it; a refill stays); increment: amount is added; decrement: amount is taken off, remaining floors at 0',
    ),
    amount: Units('Units: 0 to 10^12 for set, 1 to 10^12 for increment and decrement'),
  },
  { title: 'CreditsOperation', additionalProperties: false, 'x-error-message': 'must be a JSON object with operation and amount' },
);
export type CreditsOperation = Static<typeof CreditsOperation>;
