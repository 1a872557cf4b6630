import { Type } from '@sinclair/typebox';

// The features' own settings: rate limits, usage webhooks, the key cache, idempotency, the pets cache.
// Each description is the setting's documentation (see schema.ts).

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
      "Plans in shadow mode: past its limits a key of these plans is served, with the headers of a refusal, counted in `rate_limit_shadow_refusals_total` and logged once a minute; never refused or banned. The admin API's `enforceLimits: false` does the same for one key.",
  }),
  RATE_LIMIT_CONCURRENCY: Type.String({
    default: 'free=5,pro=20,business=50,enterprise=100',
    pattern: '^(off|[a-z]+=[0-9]+(,[a-z]+=[0-9]+)*)$',
    examples: ['free=2,pro=10', 'off'],
    description:
      "Requests a key may have in flight at once, per plan, as `plan=requests` pairs (1 to 100000); a plan not named has no such limit, `off` none. The admin API's `concurrency` sets one key's own. Over it: 429 `concurrency_limited`, costing no quota.",
  }),
};

/** Usage events: where they go, how they are signed, when they are sent, how long they are kept. */
export const webhooks = {
  WEBHOOK_URL: Type.Optional(
    Type.String({
      pattern: '^https?://[^/\\s]+(/\\S*)?$',
      examples: ['https://billing.example.com/hooks/pet-store'],
      description:
        'Where usage events are POSTed (`usage.threshold`, `key.banned`), signed with `WEBHOOK_SECRET`; unset, none are recorded or sent (docs/admin-api.md, "Usage events"). ' +
        'A user and password in it (`https://user:password@host/path`, %-escaped) are sent as HTTP Basic authentication, never in the URL, and never shown.',
    }),
  ),
  WEBHOOK_SECRET: Type.Optional(
    Type.String({
      minLength: 32,
      description:
        "The secret the `Pet-Store-Signature` header's HMAC-SHA256 is keyed with: at least 32 characters, required with `WEBHOOK_URL`. Never logged.",
    }),
  ),
  WEBHOOK_USAGE_THRESHOLDS: Type.String({
    default: '80,100',
    pattern: '^[0-9]+(,[0-9]+)*$',
    examples: ['50,80,100'],
    description: "Percentages of a key's window (1 to 100, ascending): crossing each sends one `usage.threshold` event per window.",
  }),
  WEBHOOK_RETENTION_DAYS: Type.Integer({
    minimum: 1,
    default: 30,
    description:
      'Delivered and failed usage events are deleted this many days after they were recorded (pending ones are kept, however old); with `WEBHOOK_URL`.',
  }),
};

/** API keys held in memory. */
export const keyCache = {
  KEY_CACHE_MAX_ENTRIES: Type.Integer({
    minimum: 1,
    default: 100_000,
    description:
      'API keys each instance keeps in memory at most (the recently used ones); the rest are looked up on first use. ' +
      'Memory follows this, not the number of keys.',
  }),
};

/** Stored Idempotency-Keys. */
export const idempotency = {
  IDEMPOTENCY_KEY_RETENTION_HOURS: Type.Integer({
    minimum: 24,
    default: 24,
    description:
      'How long an `Idempotency-Key` and the response it stored are kept: at least the 24 hours clients are promised. ' +
      'Published in the OpenAPI document.',
  }),
};

/** Pets held in memory. */
export const petsCache = {
  PETS_CACHE_MAX_BYTES: Type.Integer({
    minimum: 0,
    default: 32 * 1024 * 1024,
    description: 'Bytes of pets and listing pages each instance caches at most; `0` turns the cache off.',
  }),
};
