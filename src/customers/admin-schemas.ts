import { Type, type Static } from '@sinclair/typebox';
import { Concurrency, Limit } from '../api-keys/admin-schemas.js';
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

/** Bounded as an enterprise key's own limits are (migrations/015). */
export const CustomerLimits = Type.Object(
  {
    perMinute: { ...Limit('minute'), description: 'Requests per minute across all the customer’s keys together' },
    perDay: { ...Limit('day'), description: 'Requests per day across all the customer’s keys together' },
    concurrency: Type.Optional(
      Type.Union([Concurrency, Type.Null()], {
        description: 'Requests in flight at once across all the customer’s keys; null (or absent) for no such limit',
        'x-error-message': 'must be an integer from 1 to 100000, or null',
      }),
    ),
  },
  {
    title: 'CustomerLimits',
    description:
      'Limits that bind all the customer’s keys together (one shared minute, day and concurrency), beside each key’s own plan limits: whichever is spent refuses',
    additionalProperties: false,
    'x-error-message': 'must be a JSON object with perMinute and perDay, and concurrency if any',
  },
);
export type CustomerLimits = Static<typeof CustomerLimits>;

/** In a body: null (or, on create, absent) for no shared limits. */
const LimitsInput = Type.Union([CustomerLimits, Type.Null()], {
  description: `${CustomerLimits.description}; null for none`,
  'x-error-message': 'must be a JSON object with perMinute and perDay, and concurrency if any; or null',
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
