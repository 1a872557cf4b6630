import { Type, type Static } from '@sinclair/typebox';
import { DEFAULT_OVERLAP_SECONDS, KEY_STATES, MAX_OVERLAP_SECONDS } from './lifecycle.js';
import { DATE_TIME, LATEST_EXPIRY } from './expiry.js';
import { Limits, type Limits as LimitsList } from '../plans/limits.js';
import { Credits, CreditsChange, CreditsInput } from '../credits/schemas.js';
import { Cursor, Id, Literals, Name, Nullable, PageLimit, Timestamp } from '../platform/schemas/common.js';
import { Origin } from '../platform/schemas/origin.js';

/** A plan's name, as the plans table bounds it (migrations/019); which plans there are is the table's (GET /admin/v1/plans). */
export const Plan = Type.String({
  pattern: '^[a-z][a-z0-9_-]{0,31}$',
  description: 'The plan (any in GET /admin/v1/plans), whose windows, concurrency and shadow mode the key takes unless it has its own',
  'x-error-message': 'must be a lower-case letter then up to 31 lower-case letters, digits, _ or -',
});
export const KeyState = Literals(
  KEY_STATES,
  'active; expired (past expiresAt); revoked; rotated (replaced by replacedBy, working until expiresAt)',
);

// A window's limit: a whole number up to 2^31 - 1.
export const Limit = (window: 'minute' | 'day') =>
  Type.Integer({
    minimum: 1,
    maximum: 2_147_483_647,
    description: `The short form of a fixed window named ${window} (${window === 'minute' ? 60 : 86_400} s): replaces or adds it in the key’s windows (its own, else its plan’s)`,
    'x-error-message': 'must be an integer from 1 to 2147483647',
  });

/** A key's own windows in an answer: null for its plan's. */
export const OwnLimits = Type.Unsafe<LimitsList | null>({
  ...Limits,
  nullable: true,
  description: 'The key’s own windows, which replace its plan’s (shortest first); null: its plan’s',
});

/** In a body: a key's own windows, or null to follow its plan's again. */
const LimitsInput = Type.Union([Limits, Type.Null()], {
  description: `${Limits.description}: the key’s own, which replace its plan’s (for a key of any plan; a plan without limits needs them); null follows the plan’s again`,
  'x-error-message': 'must be a list of 1 to 5 windows, or null',
});

const EnforceLimits = Type.Boolean({
  description:
    'False for shadow mode: past its limits the key is served, with the headers of a refusal, and counted as a would-be refusal; never banned',
});

export const Concurrency = Type.Integer({
  minimum: 1,
  maximum: 100_000,
  description: "The key's own limit of requests in flight at once; null for its plan's (RATE_LIMIT_CONCURRENCY)",
});
/** In a body: null puts the key back on its plan's limit. */
const ConcurrencyInput = Type.Union([Concurrency, Type.Null()], {
  description: Concurrency.description,
  'x-error-message': 'must be an integer from 1 to 100000, or null',
});

/** A browser key's web origins: each as browsers send it (the key rules check that, and that none repeats). */
export const AllowedOrigins = Type.Array(Origin, {
  minItems: 1,
  maxItems: 20,
  description:
    'The web origins the key may be used from (a browser key): a request with it whose Origin is missing or not one of them is refused, 403 `origin_not_allowed`; 1 to 20, each once, exactly as browsers send Origin (lowercase, no path, no default port)',
  'x-error-message': 'must be a list of 1 to 20 web origins',
});
/** In a body: null lets the key be used from any origin again. */
const AllowedOriginsInput = Type.Union([AllowedOrigins, Type.Null()], {
  description: `${AllowedOrigins.description}; null: any origin`,
  'x-error-message': 'must be a list of 1 to 20 web origins, or null',
});

// The column's bound; '' is a key without a name.
export const KeyName = Name({
  max: 200,
  emptyAllowed: true,
  description:
    'Who or what the key is for (a customer, a subscription): up to 200 characters, one of them visible; no control characters or bidi overrides',
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
    limits: OwnLimits,
    perMinute: Nullable(
      Type.Integer({ description: 'The limit of the key’s window named minute (its own, else its plan’s); null when it has none' }),
    ),
    perDay: Nullable(
      Type.Integer({ description: 'The limit of the key’s window named day (its own, else its plan’s); null when it has none' }),
    ),
    readOnly: Type.Boolean({ description: 'May call the GET operations only' }),
    allowedOrigins: Nullable({ ...AllowedOrigins, description: `${AllowedOrigins.description}; null: any origin` }),
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
    customerId: Nullable(
      Type.Integer({ format: 'int64', description: 'The customer the key belongs to (kept through rotation); null for none' }),
    ),
    credits: Nullable({
      ...Credits,
      description: 'Prepaid credits of the key’s own (its quota’s, kept through rotation), beside its customer’s if any; null for none',
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
    limits: Type.Optional(LimitsInput),
    perMinute: Type.Optional(Limit('minute')),
    perDay: Type.Optional(Limit('day')),
    expiresAt: Type.Optional(FutureTimestamp),
    readOnly: Type.Optional(Type.Boolean({ description: 'A key for the GET operations only' })),
    allowedOrigins: Type.Optional(AllowedOriginsInput),
    enforceLimits: Type.Optional({ ...EnforceLimits, default: true }),
    concurrency: Type.Optional(ConcurrencyInput),
    customerId: Type.Optional(Type.Integer({ ...Id, description: 'The customer the key belongs to; by default none' })),
    credits: Type.Optional({ ...CreditsInput, description: `${CreditsInput.description}: the key’s own, kept through rotation` }),
  },
  { title: 'NewAdminKey', additionalProperties: false, 'x-error-message': 'must be a JSON object with known fields only' },
);
export type NewAdminKey = Static<typeof NewAdminKey>;

export const AdminKeyChange = Type.Object(
  {
    plan: Type.Optional(Plan),
    limits: Type.Optional(LimitsInput),
    perMinute: Type.Optional(Limit('minute')),
    perDay: Type.Optional(Limit('day')),
    name: Type.Optional(KeyName),
    enforceLimits: Type.Optional(EnforceLimits),
    concurrency: Type.Optional(ConcurrencyInput),
    allowedOrigins: Type.Optional(AllowedOriginsInput),
    credits: Type.Optional(CreditsChange),
  },
  {
    title: 'AdminKeyChange',
    description:
      'Absent fields keep their value; limits null takes the plan’s windows again, allowedOrigins null any origin; a new plan with limits replaces the key’s own unless the change gives limits (one without keeps them); credits set the balance (and its refill: none unless given), null removes it',
    additionalProperties: false,
    minProperties: 1,
    'x-error-message':
      'must be a JSON object with at least one of plan, limits, perMinute, perDay, name, enforceLimits, concurrency, allowedOrigins, credits',
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
  customerId: Type.Optional(Type.Integer({ ...Id, description: 'Keys of this customer' })),
  limit: PageLimit('Entries per page'),
  cursor: Cursor,
});
export type ListKeysQuery = Static<typeof ListKeysQuery>;
