import { Lru } from '../platform/lib/lru.js';
import { SingleFlight } from '../platform/lib/single-flight.js';
import { PetStatus, type Pet } from './schemas.js';
import { ENTRY_OVERHEAD, ListingRuns, petBytes, type Run } from './listing-runs.js';
import type { ListPage, ListQuery, PetsRepository } from './repository.js';

/**
 * What changed in the pets table: pets with ids from minId to maxId and these statuses (null for
 * none) were added, or, for `everything`, rows were changed or removed, which no operation does
 * but an operator may.
 */
export type PetsChange = { minId: number; maxId: number; statuses: Array<PetStatus | null> } | 'everything';

/** A notice from the pets_changed trigger (migrations/004): "<min id> <max id> <status>..." or "*". */
export function parsePetsChange(payload: string): PetsChange {
  const [minId, maxId, ...statuses] = payload.split(' ');
  if (payload === '*' || !minId || !maxId) return 'everything';
  return {
    minId: Number(minId),
    maxId: Number(maxId),
    statuses: statuses.map((status) => (PetStatus.anyOf.some((literal) => literal.const === status) ? (status as PetStatus) : null)),
  };
}

export interface PetsCacheOptions {
  /** Bound on what the cache holds, counted as an estimate of the bytes its entries take. */
  maxBytes: number;
  /** How long what was read is served at most: the bound on staleness should a change notice be lost. */
  ttlMs: number;
  now: () => number;
  onLookup?: (kind: 'list' | 'pet', outcome: 'hit' | 'miss') => void;
}

const ALL = 'all';
const PETS = 'pets';
const filterOf = (status: PetStatus | undefined) => status ?? ALL;

/**
 * A bounded, invalidated cache in front of the pets repository, with identical concurrent reads
 * coalesced into one query. Pets never change once created and ids only grow, so what a read of
 * a page learns is a fact about a range of ids: pages that meet or touch are merged into runs,
 * and any later page that falls inside a run is answered from it, whatever its cursor and limit
 * (a walk through a listing soon reads nothing more). A pet, once found, is kept; a miss never is.
 *
 * A change invalidates only the runs whose ids it falls among; the run that reached the end of
 * the listing merely learns that it no longer does, so the pages already known, up to the end,
 * survive a stream of creates. Against races, a
 * write invalidates its filters' reads under way, and a read that began before it is neither
 * joined by later requests nor kept: after a 201, no request on this instance is answered from a
 * read that began before the commit.
 *
 * Hand-written rather than async-cache-dedupe: that library's invalidation neither detaches
 * in-flight deduplicated reads nor keeps a read that began before a write from being stored, its
 * lifetimes are whole seconds, its memory is bounded by entries, not bytes, and it caches by key,
 * where a run answers pages it was never asked for.
 */
export function cachedPetsRepository(repository: PetsRepository, options: PetsCacheOptions) {
  const { maxBytes, ttlMs, now, onLookup = () => {} } = options;
  const pets = new Map<number, { pet: Pet; expiresAt: number }>();
  /**
   * Everything held, weighed in estimated bytes, oldest first: what goes when the bytes run out.
   * Reads answered from it leave the order as it was, sparing the hot path.
   */
  const age = new Lru<Run | Pet, undefined>(maxBytes, {
    onEvict: (oldest) => ('afterId' in oldest ? runs.unlist(oldest) : pets.delete(oldest.id)),
  });
  const runs = new ListingRuns(age, { ttlMs, now });
  /** Reads under way, scoped by filter (PETS for pets by id). */
  const flights = new SingleFlight<string>();
  /** Counts every change that may make a read answer differently: creates, notices, flushes. */
  let dataVersion = 0;

  function forgetPet(id: number) {
    const held = pets.get(id);
    if (!held) return;
    pets.delete(id);
    age.delete(held.pet);
  }

  function invalidate(change: PetsChange) {
    dataVersion++;
    if (change === 'everything') {
      flush();
      return;
    }
    const filters = new Set([ALL, ...change.statuses.filter((status): status is PetStatus => status !== null)]);
    for (const filter of filters) {
      flights.invalidate(filter);
      runs.added(filter, change);
    }
  }

  /** Forgets everything, as when notices of changes may have been missed. */
  function flush() {
    dataVersion++;
    runs.clear();
    pets.clear();
    age.clear();
    flights.invalidateAll();
  }

  return {
    /** Within a transaction, what the cache knows changes only once it has committed: before, no reader can see the pet. */
    async create(...[pet, tx]: Parameters<PetsRepository['create']>): Promise<Pet> {
      const created = await repository.create(pet, tx);
      const change = { minId: created.id, maxId: created.id, statuses: [created.status ?? null] };
      if (tx) tx.afterCommit(() => invalidate(change));
      else invalidate(change);
      return created;
    },

    async findById(id: number): Promise<Pet | undefined> {
      const held = pets.get(id);
      if (held && held.expiresAt > now()) {
        onLookup('pet', 'hit');
        return held.pet;
      }
      if (held) forgetPet(id);
      onLookup('pet', 'miss');
      // Pets never change, so no create makes a found pet stale: one scope for all of them, which only a flush invalidates.
      return flights.run(
        `pet:${id}`,
        () => repository.findById(id),
        (pet) => {
          if (pet && !pets.has(id) && age.set(pet, undefined, ENTRY_OVERHEAD + petBytes(pet)))
            pets.set(id, { pet, expiresAt: now() + ttlMs });
        },
        PETS,
      );
    },

    async list(query: ListQuery): Promise<ListPage> {
      const { limit, status, afterId = 0 } = query;
      const filter = filterOf(status);
      const known = runs.answer(filter, query);
      onLookup('list', known ? 'hit' : 'miss');
      if (known) return known;
      // The repository reads one row more than the page to learn whether more follow; the page
      // and that answer are what this read learns.
      return flights.run(
        `list:${filter}:${afterId}:${limit}`,
        () => repository.list(query),
        (page) => runs.learn(filter, afterId, page.pets, page.nextAfterId === undefined),
        filter,
      );
    },

    invalidate,
    flush,
    /** Moves on whenever a read may answer differently; equal values mean every answer in between was the same. */
    dataVersion: () => dataVersion,
    /** Runs and pets held now, and their estimated bytes. */
    size: () => ({ entries: age.size, bytes: age.weight }),
  };
}
