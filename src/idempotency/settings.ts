import { Type } from '@sinclair/typebox';

// Idempotency's setting, its description the setting's documentation (src/config/schema.ts).

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
