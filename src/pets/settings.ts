import { Type } from '@sinclair/typebox';

// The pets cache's setting, its description the setting's documentation (src/config/schema.ts).

/** Pets held in memory. */
export const petsCache = {
  PETS_CACHE_MAX_BYTES: Type.Integer({
    minimum: 0,
    default: 32 * 1024 * 1024,
    description: 'Bytes of pets and listing pages each instance caches at most; `0` turns the cache off.',
  }),
};
