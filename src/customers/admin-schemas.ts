import { Type, type Static } from '@sinclair/typebox';
import { Concurrency } from '../api-keys/admin-schemas.js';
import { Limits, type Limits as LimitsList } from '../plans/limits.js';
import { Credits, CreditsChange, CreditsInput } from '../credits/schemas.js';
import { Cursor, Id, Identifier, Name, Nullable, PageLimit, Timestamp } from '../platform/schemas/common.js';

// The columns' bounds (migrations/014), as a key's name is bounded.
export const ExternalId = Identifier({
  max: 200,
  description:
    "The seller's own id of the customer (its billing or CRM id), unique: 1 to 200 characters in Unicode NFC, each visible but single spaces between words; no invisible, directional or control characters, so no look-alike of another id",
});

const CustomerName = Name({
  max: 200,
  emptyAllowed: true,
  description:
    "The customer's name as people read it: up to 200 characters ('' for none), one of them visible; no control characters or bidi overrides",
});

const SharedLimit = (window: 'minute' | 'day', seconds: number) =>
  Type.Integer({
    minimum: 1,
    maximum: 2_147_483_647,
    description: `The short form of a fixed window named ${window} (${seconds} s) across all the customer’s keys together: replaces or adds it in the windows`,
    'x-error-message': 'must be an integer from 1 to 2147483647',
  });

const SharedConcurrency = Type.Union([Concurrency, Type.Null()], {
  description: 'Requests in flight at once across all the customer’s keys; null (or absent) for no such limit',
  'x-error-message': 'must be an integer from 1 to 100000, or null',
});

/** The object form of a customer's limits: windows, or the short form of a minute and a day (both, without windows), and a concurrency. */
export const CustomerLimitsInput = Type.Object(
  {
    windows: Type.Optional({ ...Limits, description: `${Limits.description}, across all the customer’s keys together` }),
    perMinute: Type.Optional(SharedLimit('minute', 60)),
    perDay: Type.Optional(SharedLimit('day', 86_400)),
    concurrency: Type.Optional(SharedConcurrency),
  },
  {
    title: 'CustomerLimitsInput',
    description:
      'Limits that bind all the customer’s keys together, beside each key’s own: windows (perMinute and perDay replace or add the windows named minute and day in them), or perMinute and perDay alone; and a concurrency',
    additionalProperties: false,
    'x-error-message': 'must be a JSON object with windows, or perMinute and perDay, and concurrency if any',
  },
);

/** A customer's limits in an answer: its windows, the limits of those named minute and day (null for none), its concurrency. */
export const CustomerLimits = Type.Object(
  {
    perMinute: Nullable(Type.Integer({ description: 'The limit of its window named minute; null when it has none' })),
    perDay: Nullable(Type.Integer({ description: 'The limit of its window named day; null when it has none' })),
    windows: Type.Unsafe<LimitsList>({ ...Limits, description: 'Its windows, shortest first' }),
    concurrency: Nullable({ ...Concurrency, description: 'Requests in flight at once across all its keys; null for no such limit' }),
  },
  {
    title: 'CustomerLimits',
    description:
      'Limits that bind all the customer’s keys together (shared windows and concurrency), beside each key’s own: whichever is spent refuses',
  },
);
export type CustomerLimits = Static<typeof CustomerLimits>;

/** In a body: a list of windows, the object form, or null (or, on create, absent) for no shared limits. */
const LimitsInput = Type.Union([Limits, CustomerLimitsInput, Type.Null()], {
  description: `Limits that bind all the customer’s keys together, beside each key’s own: a list of windows (no concurrency), or ${CustomerLimitsInput.title}; null for none`,
  'x-error-message':
    'must be a list of 1 to 5 windows, a JSON object with windows, or perMinute and perDay, and concurrency if any; or null',
});

export const Customer = Type.Object(
  {
    id: Type.Integer({ format: 'int64' }),
    externalId: Type.String({ description: ExternalId.description }),
    name: Type.String(),
    limits: Nullable(CustomerLimits),
    credits: Nullable({ ...Credits, description: 'Prepaid credits all the customer’s keys spend; null for none' }),
    createdAt: Timestamp,
    updatedAt: Timestamp,
  },
  { title: 'Customer', description: 'A customer of the seller, who may own several keys' },
);
export type Customer = Static<typeof Customer>;

export const Customers = Type.Array(Customer, { title: 'Customers', description: 'One page of customers, in id order' });

export const NewCustomer = Type.Object(
  {
    externalId: ExternalId,
    name: Type.Optional(CustomerName),
    limits: Type.Optional(LimitsInput),
    credits: Type.Optional({ ...CreditsInput, description: `${CreditsInput.description}, which all the customer’s keys spend` }),
  },
  { title: 'NewCustomer', additionalProperties: false, 'x-error-message': 'must be a JSON object with known fields only' },
);
export type NewCustomer = Static<typeof NewCustomer>;

export const CustomerPatch = Type.Object(
  {
    name: Type.Optional(CustomerName),
    externalId: Type.Optional(ExternalId),
    limits: Type.Optional(LimitsInput),
    credits: Type.Optional(CreditsChange),
  },
  {
    title: 'CustomerPatch',
    description:
      'Absent fields keep their value; limits null removes the shared limits; credits set the balance (and its refill: none unless given), null removes it',
    additionalProperties: false,
    minProperties: 1,
    'x-error-message': 'must be a JSON object with at least one of name, externalId, limits, credits',
  },
);
export type CustomerPatch = Static<typeof CustomerPatch>;

export const CustomerParams = Type.Object({ id: Type.Integer({ ...Id, description: 'The customer id' }) });

export const ListCustomersQuery = Type.Object({
  // Any name, not only an id by today's rule: an id stored before it is still found, a look-alike finds none.
  externalId: Type.Optional(
    Name({ max: 200, description: 'The customer with exactly this externalId (one stored before the rule of ids included)' }),
  ),
  limit: PageLimit('Entries per page'),
  cursor: Cursor,
});
export type ListCustomersQuery = Static<typeof ListCustomersQuery>;
