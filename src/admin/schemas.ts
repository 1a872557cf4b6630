import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { DEFAULT_OVERLAP_SECONDS, KEY_STATES, MAX_OVERLAP_SECONDS } from '../api-keys/lifecycle.js';
import { DATE_TIME, LATEST_EXPIRY } from '../api-keys/expiry.js';
import { PLANS } from '../api-keys/plans.js';
import { DELIVERY_STATES } from '../webhooks/repository.js';
import { Cursor, Id, Name, PageLimit } from '../platform/schemas/common.js';

/** A value or null, as OpenAPI 3.0 writes it (`nullable`), for responses. */
const Nullable = <T extends TSchema>(schema: T) => Type.Unsafe<Static<T> | null>({ ...schema, nullable: true });

const literals = <T extends string>(values: readonly T[], description: string) =>
  Type.Union(
    values.map((value) => Type.Literal(value)),
    { description, 'x-error-message': `must be one of ${values.join(', ')}` },
  );

const Timestamp = Type.String({ format: 'date-time' });

export const Plan = literals(PLANS, 'The plan, whose limits the key gets (enterprise: its own)');
export const KeyState = literals(
  KEY_STATES,
  'active; expired (past expiresAt); revoked; rotated (replaced by replacedBy, working until expiresAt)',
);

// The column's type: a whole number up to 2^31 - 1.
const Limit = (window: string) =>
  Type.Integer({
    minimum: 1,
    maximum: 2_147_483_647,
    description: `Requests per ${window}: enterprise keys only, required for them`,
    'x-error-message': 'must be an integer from 1 to 2147483647',
  });

const EnforceLimits = Type.Boolean({
  description:
    'False for shadow mode: past its limits the key is served, with the headers of a refusal, and counted as a would-be refusal; never banned',
});

const Concurrency = Type.Integer({
  minimum: 1,
  maximum: 100_000,
  description: "The key's own limit of requests in flight at once; null for its plan's (RATE_LIMIT_CONCURRENCY)",
});
/** In a body: null puts the key back on its plan's limit. */
const ConcurrencyInput = Type.Union([Concurrency, Type.Null()], {
  description: Concurrency.description,
  'x-error-message': 'must be an integer from 1 to 100000, or null',
});

// The column's bound; '' is a key without a name.
export const KeyName = Name({
  max: 200,
  emptyAllowed: true,
  description:
    'Who or what the key is for (a customer, a subscription): up to 200 characters, one of them visible; no control characters or bidi overrides',
});

/** Who or what holds an admin token: a key's name, but never none (the keys command is its only input). */
export const AdminTokenName = Name({
  max: 200,
  description: 'Who or what holds the admin token: up to 200 characters, one of them visible; no control characters or bidi overrides',
});

/** An ISO 8601 date-time with a time zone, as the keys command takes it; the route checks it is on the calendar, ahead and not past LATEST_EXPIRY (parseExpiry). */
const FutureTimestamp = Type.String({
  pattern: DATE_TIME.source,
  description: `When the key stops working: an ISO 8601 date-time with a time zone, in the future, no later than ${LATEST_EXPIRY}`,
  'x-error-message': 'must be an ISO 8601 date-time with a time zone, such as 2027-01-31T00:00:00Z',
});

export const AdminKey = Type.Object(
  {
    id: Type.Integer({ format: 'int64' }),
    name: Type.String(),
    plan: Plan,
    perMinute: Type.Integer({ description: "Requests per minute: the plan's, or the enterprise key's own" }),
    perDay: Type.Integer({ description: "Requests per day: the plan's, or the enterprise key's own" }),
    readOnly: Type.Boolean({ description: 'May call the GET operations only' }),
    enforceLimits: EnforceLimits,
    concurrency: Nullable(Concurrency),
    state: KeyState,
    createdAt: Timestamp,
    expiresAt: Nullable(Timestamp),
    revokedAt: Nullable(Timestamp),
    replacedBy: Nullable(Type.Integer({ format: 'int64', description: 'The key this one was rotated into' })),
    quotaId: Type.Integer({
      format: 'int64',
      description: 'The rate-limit quota the key counts in, shared by the keys rotated from one another',
    }),
    key: Type.Optional(
      Type.String({
        description: 'The secret API key: in the answer of a create or a rotation only, and never again (not in a replay either)',
      }),
    ),
  },
  { title: 'AdminKey', description: 'An API key as the admin API shows it: never its hash' },
);
export type AdminKey = Static<typeof AdminKey>;

export const AdminKeys = Type.Array(AdminKey, { title: 'AdminKeys', description: 'One page of keys, in id order' });

export const NewAdminKey = Type.Object(
  {
    plan: Plan,
    name: Type.Optional(KeyName),
    perMinute: Type.Optional(Limit('minute')),
    perDay: Type.Optional(Limit('day')),
    expiresAt: Type.Optional(FutureTimestamp),
    readOnly: Type.Optional(Type.Boolean({ description: 'A key for the GET operations only' })),
    enforceLimits: Type.Optional({ ...EnforceLimits, default: true }),
    concurrency: Type.Optional(ConcurrencyInput),
  },
  { title: 'NewAdminKey', additionalProperties: false, 'x-error-message': 'must be a JSON object with known fields only' },
);
export type NewAdminKey = Static<typeof NewAdminKey>;

export const AdminKeyChange = Type.Object(
  {
    plan: Type.Optional(Plan),
    perMinute: Type.Optional(Limit('minute')),
    perDay: Type.Optional(Limit('day')),
    name: Type.Optional(KeyName),
    enforceLimits: Type.Optional(EnforceLimits),
    concurrency: Type.Optional(ConcurrencyInput),
  },
  {
    title: 'AdminKeyChange',
    description: 'Absent fields keep their value; an enterprise key keeps its limits unless given new ones',
    additionalProperties: false,
    minProperties: 1,
    'x-error-message': 'must be a JSON object with at least one of plan, perMinute, perDay, name, enforceLimits, concurrency',
  },
);
export type AdminKeyChange = Static<typeof AdminKeyChange>;

export const RotateKey = Type.Object(
  {
    overlapSeconds: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: MAX_OVERLAP_SECONDS,
        default: DEFAULT_OVERLAP_SECONDS,
        description: 'How long the old key keeps working (never past its own expiry); 0 revokes it at once',
        'x-error-message': `must be an integer from 0 to ${MAX_OVERLAP_SECONDS}`,
      }),
    ),
    expiresAt: Type.Optional({ ...FutureTimestamp, description: 'When the new key stops working; by default never' }),
  },
  { title: 'RotateKey', additionalProperties: false, 'x-error-message': 'must be a JSON object with known fields only' },
);
export type RotateKey = Static<typeof RotateKey>;

export const KeyParams = Type.Object({ id: Type.Integer({ ...Id, description: 'The key id' }) });

export const ListKeysQuery = Type.Object({
  plan: Type.Optional(Plan),
  state: Type.Optional(KeyState),
  name: Type.Optional({ ...KeyName, description: 'Keys with exactly this name' }),
  limit: PageLimit('Entries per page'),
  cursor: Cursor,
});
export type ListKeysQuery = Static<typeof ListKeysQuery>;

const UsageWindow = Type.Object({
  limit: Type.Integer(),
  used: Type.Integer({ description: 'Requests counted in the window so far' }),
  resetAt: Timestamp,
});

export const KeyUsage = Type.Object(
  {
    minute: UsageWindow,
    day: UsageWindow,
    bannedUntil: Nullable({ ...Timestamp, description: 'When the ban ends; null when not banned' }),
    source: Type.Union([Type.Literal('redis'), Type.Literal('memory')], {
      description: "The store that answered: redis, or this instance's memory (no Redis configured, or during a Redis outage)",
    }),
  },
  { title: 'KeyUsage', description: "What the key's quota holds now, read from the limiter's own store; counts nothing" },
);
export type KeyUsage = Static<typeof KeyUsage>;

const Source = Type.Union([Type.Literal('redis'), Type.Literal('memory')], {
  description: "The store that answered: redis, or this instance's memory (no Redis configured, or during a Redis outage)",
});

export const AddressBans = Type.Object(
  {
    bans: Type.Array(
      Type.Object({
        address: Type.String({ description: 'An IPv4 address, or an IPv6 network of RATE_LIMIT_IPV6_PREFIX bits (`2001:db8:1:2::/64`)' }),
        bannedUntil: { ...Timestamp, description: 'When the ban ends' },
      }),
    ),
    source: Source,
  },
  { title: 'AddressBans', description: "The client addresses banned now, in address order, read from the limiter's own store" },
);

export const AddressParams = Type.Object({
  address: Type.String({
    maxLength: 100,
    description: 'An address of the client (any address of its IPv6 network will do), or the client as the list names it',
  }),
});

export const AuditEntry = Type.Object(
  {
    id: Type.Integer({ format: 'int64' }),
    at: Timestamp,
    actor: Type.String({
      description:
        'What made the change: admin-api (adminTokenId says which token), cli:keys (the keys command), system:development-key (the development key of an embedded first start)',
    }),
    adminTokenId: Nullable(
      Type.Integer({ format: 'int64', description: 'The admin token that made the change; null when the admin API did not' }),
    ),
    requestId: Nullable(Type.String({ description: 'The X-Request-Id of the admin request, as logged' })),
    action: Type.String({
      description:
        'key.create, key.update, key.rotate, key.revoke, key.ban_lift, address.ban_lift, webhook_delivery.retry, admin_token.create, admin_token.revoke',
    }),
    keyId: Nullable(Type.Integer({ format: 'int64' })),
    details: Type.Object({}, { additionalProperties: true, description: 'What changed; never a secret' }),
  },
  { title: 'AuditEntry' },
);
export const AuditEntries = Type.Array(AuditEntry, { title: 'AuditEntries', description: 'One page of audit entries, newest first' });

export const AuditQuery = Type.Object({ limit: PageLimit('Entries per page'), cursor: Cursor });
export type AuditQuery = Static<typeof AuditQuery>;

export const DeliveryState = literals(
  DELIVERY_STATES,
  'pending (to be attempted at nextAttemptAt), delivered (the receiver answered 2xx), failed (failed for 24 hours; retry puts it back)',
);

export const WebhookDelivery = Type.Object(
  {
    id: Type.Integer({ format: 'int64' }),
    eventId: Type.String({ format: 'uuid', description: "The event's id: the same on every attempt" }),
    type: Type.String({ description: 'usage.threshold or key.banned' }),
    state: DeliveryState,
    attempts: Type.Integer({ description: 'Attempts made so far' }),
    createdAt: Timestamp,
    nextAttemptAt: Nullable({ ...Timestamp, description: 'When a pending delivery is attempted next; null otherwise' }),
    lastAttemptAt: Nullable(Timestamp),
    lastStatus: Nullable(Type.Integer({ description: "The receiver's status at the last attempt; null when it gave none" })),
    lastError: Nullable(Type.String({ description: 'What went wrong at the last attempt: HTTP 500, no answer within 10 s, ...' })),
    deliveredAt: Nullable(Timestamp),
    data: Type.Object(
      {},
      {
        additionalProperties: true,
        description:
          "The event's data, as POSTed: usage.threshold {keyId, quotaId, plan, window, limit, used, threshold, resetAt}; key.banned {keyId, quotaId, bannedUntil}",
      },
    ),
  },
  { title: 'WebhookDelivery', description: 'A usage event and its delivery to WEBHOOK_URL' },
);
export const WebhookDeliveries = Type.Array(WebhookDelivery, {
  title: 'WebhookDeliveries',
  description: 'One page of deliveries, newest first',
});

export const ListDeliveriesQuery = Type.Object({
  state: Type.Optional(DeliveryState),
  limit: PageLimit('Entries per page'),
  cursor: Cursor,
});
export type ListDeliveriesQuery = Static<typeof ListDeliveriesQuery>;

export const DeliveryParams = Type.Object({ id: Type.Integer({ ...Id, description: 'The delivery id' }) });
