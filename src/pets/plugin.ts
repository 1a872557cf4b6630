import fp from 'fastify-plugin';
import { Counter, Gauge } from 'prom-client';
import { cachedPetsRepository, parsePetsChange } from './pets-cache.js';
import { createPetsRepository, type PetsRepository } from './repository.js';
import type { DataVersion } from '../platform/http/conditional-requests.js';

declare module 'fastify' {
  interface FastifyInstance {
    petsRepository: PetsRepository;
    /** With the pets cache: the data version of every read of pets, and the cache's bound on staleness. */
    dataVersion?: DataVersion;
  }
}

export interface PetsOptions {
  /** Bytes the pets cache may hold; 0 turns it off. */
  cacheMaxBytes: number;
}

/**
 * The longest a cached page or pet is served: the bound on how stale a listing can be on one
 * instance after another instance adds a pet, should the notice of it be lost. Notices normally
 * arrive within milliseconds.
 */
const PETS_CACHE_TTL_MS = 1_000;

/**
 * Pets: what routes read and write through. Reads go through a cache
 * (src/pets/pets-cache.ts) that this instance's creates, and every other instance's
 * through PostgreSQL notices, keep current.
 */
export default fp<PetsOptions>(
  async function pets(app, { cacheMaxBytes }) {
    const replicas = app.replicaReads;
    const repository = createPetsRepository(app.db, replicas);
    if (cacheMaxBytes === 0) {
      // Replicas still need to hear of other instances' creates, to wait for a replica that has them.
      if (replicas) {
        const changed = () => replicas.changed();
        app.addHook('onClose', await app.db.listen('pets_changed', changed, changed));
      }
      app.decorate('petsRepository', repository);
      app.decorate('dataVersion', undefined);
      return;
    }
    const lookups = new Counter({
      name: 'pets_cache_lookups_total',
      help: 'Reads of pets and listing pages from the cache, by kind and outcome (hit or miss)',
      labelNames: ['kind', 'outcome'] as const,
      registers: [app.metricsRegistry],
    });
    const cached = cachedPetsRepository(repository, {
      maxBytes: cacheMaxBytes,
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
    // Notices missed while the listening connection was down are gone: forget everything then
    // (and, with replicas, read from none until one has replayed all the primary wrote by now).
    const stopListening = await app.db.listen(
      'pets_changed',
      (payload) => {
        replicas?.changed();
        cached.invalidate(parsePetsChange(payload));
      },
      () => {
        replicas?.changed();
        cached.flush();
      },
    );
    app.addHook('onClose', stopListening);
    app.decorate('petsRepository', cached);
    app.decorate('dataVersion', { current: cached.dataVersion, ttlMs: PETS_CACHE_TTL_MS });
  },
  { name: 'pets', dependencies: ['database', 'metrics'] },
);
