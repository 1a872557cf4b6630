import { Type, type Static } from '@sinclair/typebox';
import { Cursor, Id, Name, PageLimit, Timestamp } from '../platform/schemas/common.js';

// The columns' bounds (migrations/014), as a key's name is bounded.
export const ExternalId = Name({
  max: 200,
  description:
    "The seller's own id of the customer (its billing or CRM id), unique: 1 to 200 characters, one of them visible; no control characters or bidi overrides",
});

const CustomerName = Name({
  max: 200,
  emptyAllowed: true,
  description:
    "The customer's name as people read it: up to 200 characters ('' for none), one of them visible; no control characters or bidi overrides",
});

export const Customer = Type.Object(
  {
    id: Type.Integer({ format: 'int64' }),
    externalId: Type.String({ description: ExternalId.description }),
    name: Type.String(),
    createdAt: Timestamp,
    updatedAt: Timestamp,
  },
  { title: 'Customer', description: 'A customer of the seller, who may own several keys' },
);
export type Customer = Static<typeof Customer>;

export const Customers = Type.Array(Customer, { title: 'Customers', description: 'One page of customers, in id order' });

export const NewCustomer = Type.Object(
  { externalId: ExternalId, name: Type.Optional(CustomerName) },
  { title: 'NewCustomer', additionalProperties: false, 'x-error-message': 'must be a JSON object with known fields only' },
);
export type NewCustomer = Static<typeof NewCustomer>;

export const CustomerPatch = Type.Object(
  { name: Type.Optional(CustomerName), externalId: Type.Optional(ExternalId) },
  {
    title: 'CustomerPatch',
    description: 'Absent fields keep their value',
    additionalProperties: false,
    minProperties: 1,
    'x-error-message': 'must be a JSON object with at least one of name, externalId',
  },
);
export type CustomerPatch = Static<typeof CustomerPatch>;

export const CustomerParams = Type.Object({ id: Type.Integer({ ...Id, description: 'The customer id' }) });

export const ListCustomersQuery = Type.Object({
  externalId: Type.Optional({ ...ExternalId, description: 'The customer with exactly this externalId' }),
  limit: PageLimit('Entries per page'),
  cursor: Cursor,
});
export type ListCustomersQuery = Static<typeof ListCustomersQuery>;
