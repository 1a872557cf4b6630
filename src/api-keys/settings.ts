import { Type } from '@sinclair/typebox';

// The key cache's setting, its description the setting's documentation (src/config/schema.ts).

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
