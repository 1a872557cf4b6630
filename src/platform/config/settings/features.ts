import { Type } from '@sinclair/typebox';

// The features' own settings: usage webhooks, the key cache, idempotency, the pets cache.
// Each description is the setting's documentation (see schema.ts).

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
