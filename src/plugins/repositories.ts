import fp from 'fastify-plugin';
import { Counter, Gauge } from 'prom-client';
import { createApiKeysRepository, type ApiKeysRepository } from '../repositories/api-keys.js';
import { cachedPetsRepository, type PetsChange } from '../repositories/cached-pets.js';
import { createPetsRepository, type PetsRepository } from '../repositories/pets.js';
import { PetStatus } from '../schemas/pet.js';

declare module 'fastify' {
  interface FastifyInstance {
    petsRepository: PetsRepository;
    apiKeysRepository: ApiKeysRepository;
    /**
     * With the pets cache: a number that moves whenever any read of pets may answer differently,
     * and how long an answer may be served at most (the cache's bound on staleness).
     */
    petsVersion?: { current: () => number; ttlMs: number };
  }
}

export interface RepositoriesOptions {
  /** Bytes the pets cache may hold; 0 turns it off. */
  petsCacheMaxBytes: number;
}

/**
 * The longest a cached page or pet is served: the bound on how stale a listing can be on one
 * instance after another instance adds a pet, should the notice of it be lost. Notices normally
 * arrive within milliseconds.
 */
const PETS_CACHE_TTL_MS = 1_000;

/** A notice from the pets_changed trigger (migrations/004): "<min id> <max id> <status>..." or "*". */
function parseChange(payload: string): PetsChange {
  const [minId, maxId, ...statuses] = payload.split(' ');
  if (payload === '*' || !minId || !maxId) return 'everything';
  return {
    minId: Number(minId),
    maxId: Number(maxId),
    statuses: statuses.map((status) => (PetStatus.anyOf.some((literal) => literal.const === status) ? (status as PetStatus) : null)),
  };
}

/**
 * The repositories over the app's database: what routes and plugins read and write through. Pets
 * are read through a cache (src/repositories/cached-pets.ts) that this instance's creates, and
 * every other instance's through PostgreSQL notices, keep current.
 */
export default fp<RepositoriesOptions>(
  async function repositories(app, { petsCacheMaxBytes }) {
    const pets = createPetsRepository(app.db);
    app.decorate('apiKeysRepository', createApiKeysRepository(app.db));
    if (petsCacheMaxBytes === 0) {
      app.decorate('petsRepository', pets);
      app.decorate('petsVersion', undefined);
      return;
    }
    const lookups = new Counter({
      name: 'pets_cache_lookups_total',
      help: 'Reads of pets and listing pages from the cache, by kind and outcome (hit or miss)',
      labelNames: ['kind', 'outcome'] as const,
      registers: [app.metricsRegistry],
    });
    const cached = cachedPetsRepository(pets, {
      maxBytes: petsCacheMaxBytes,
      ttlMs: PETS_CACHE_TTL_MS,
      now: app.now,
      onLookup: (kind, outcome) => lookups.inc({ kind, outcome }),
    });
    new Gauge({
      name: 'pets_cache_bytes',
      help: 'Estimated bytes the pets cache holds',
      registers: [app.metricsRegistry],
      collect() {
        this.set(cached.size().bytes);
      },
    });
    // Notices missed while the listening connection was down are gone: forget everything then.
    const stopListening = await app.db.listen('pets_changed', (payload) => cached.invalidate(parseChange(payload)), cached.flush);
    app.addHook('onClose', stopListening);
    app.decorate('petsRepository', cached);
    app.decorate('petsVersion', { current: cached.version, ttlMs: PETS_CACHE_TTL_MS });
  },
  { name: 'repositories', dependencies: ['database', 'metrics'] },
);
