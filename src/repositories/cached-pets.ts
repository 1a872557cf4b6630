import type { Pet, PetStatus } from '../schemas/pet.js';
import type { ListPage, ListQuery, PetsRepository } from './pets.js';

/**
 * What changed in the pets table: pets with ids from minId to maxId and these statuses (null for
 * none) were added, or, for `everything`, rows were changed or removed, which no operation does
 * but an operator may.
 */
export type PetsChange = { minId: number; maxId: number; statuses: Array<PetStatus | null> } | 'everything';

export interface PetsCacheOptions {
  /** Bound on what the cache holds, counted as an estimate of the bytes its entries take. */
  maxBytes: number;
  /** How long an entry is served at most: the bound on staleness should a change notice be lost. */
  ttlMs: number;
  now: () => number;
  onLookup?: (kind: 'list' | 'pet', outcome: 'hit' | 'miss') => void;
}

/** Ids fall into buckets of this many; a page is invalidated by a change in a bucket it spans. */
const BUCKET = 1024;
/** Estimated bytes of an entry besides its pets, and of a pet besides its name. */
const ENTRY_OVERHEAD = 200;
const PET_OVERHEAD = 100;

interface Entry<T> {
  value: T;
  expiresAt: number;
  bytes: number;
  /** Where an invalidation finds this entry (see refsOf). */
  refs: string[];
  /** For a page: the ids it covers, after `afterId` up to `lastId`, or on without end for the last page. */
  covers?: { afterId: number; lastId: number; last: boolean };
}

interface Flight<T> {
  promise: Promise<T>;
  /** The generation of the filter when the read began (see Generations). */
  generation: number;
}

const ALL = 'all';
const filterOf = (status: PetStatus | undefined) => status ?? ALL;

/**
 * A bounded, invalidated cache in front of the pets repository, with identical concurrent reads
 * coalesced into one query. Pets never change once created and ids only grow, so:
 * - a pet, once found, is kept (a miss is never kept: it may be created a moment later);
 * - a page changes only when a pet is added inside the id range it covers, or after its last
 *   row when it is the last page; a change invalidates exactly those pages, so the first pages
 *   of a listing survive a stream of creates at its end.
 * Correctness against races: a write bumps its filters' generations, and a read that began in an
 * older generation is neither joined by later requests nor stored, so after a 201 no request on
 * this instance is answered from a read that began before the commit.
 *
 * Hand-written rather than async-cache-dedupe: that library's invalidation neither detaches
 * in-flight deduplicated reads nor keeps a read that began before a write from being stored, its
 * TTL is whole seconds, and its memory store is bounded by entries, not bytes.
 */
export function cachedPetsRepository(repository: PetsRepository, options: PetsCacheOptions) {
  const { maxBytes, ttlMs, now, onLookup = () => {} } = options;
  const entries = new Map<string, Entry<ListPage | Pet>>();
  const index = new Map<string, Set<string>>();
  const flights = new Map<string, Flight<ListPage | Pet | undefined>>();
  const generations = new Map<string, number>();
  let bytes = 0;

  const generationOf = (filter: string) => generations.get(filter) ?? 0;

  function remove(key: string) {
    const entry = entries.get(key);
    if (!entry) return;
    entries.delete(key);
    bytes -= entry.bytes;
    for (const ref of entry.refs) index.get(ref)?.delete(key);
  }

  function store(key: string, value: ListPage | Pet, size: number, refs: string[], covers?: Entry<ListPage>['covers']) {
    remove(key);
    if (size > maxBytes) return;
    // Map order is insertion order: the oldest entries go first.
    for (const oldest of entries.keys()) {
      if (bytes + size <= maxBytes) break;
      remove(oldest);
    }
    entries.set(key, { value, expiresAt: now() + ttlMs, bytes: size, refs, covers });
    bytes += size;
    for (const ref of refs) {
      let keys = index.get(ref);
      if (!keys) index.set(ref, (keys = new Set()));
      keys.add(key);
    }
  }

  function lookup<T extends ListPage | Pet>(key: string): T | undefined {
    const entry = entries.get(key);
    if (entry && entry.expiresAt > now()) return entry.value as T;
    if (entry) remove(key);
    return undefined;
  }

  /** Single flight: one read per key at a time, joined only by requests of the same generation. */
  function read<T extends ListPage | Pet | undefined>(key: string, filter: string, load: () => Promise<T>, keep: (value: T) => void): Promise<T> {
    const generation = generationOf(filter);
    const flight = flights.get(key);
    if (flight && flight.generation === generation) return flight.promise as Promise<T>;
    const promise = load().then(
      (value) => {
        if (flights.get(key)?.promise === promise) flights.delete(key);
        if (generationOf(filter) === generation) keep(value);
        return value;
      },
      (error: unknown) => {
        if (flights.get(key)?.promise === promise) flights.delete(key);
        throw error;
      },
    );
    flights.set(key, { promise, generation });
    return promise;
  }

  const petBytes = (pet: Pet) => PET_OVERHEAD + pet.name.length * 2;

  const coversOf = (afterId: number, page: ListPage) => ({
    afterId,
    lastId: page.nextAfterId ?? page.pets.at(-1)?.id ?? afterId,
    last: page.nextAfterId === undefined,
  });

  /** A page is found again through the buckets of ids it covers and, when it is the last page, its filter's tail. */
  function refsOf(filter: string, { afterId, lastId, last }: ReturnType<typeof coversOf>): string[] {
    const refs = last ? [`${filter}:tail`] : [];
    for (let bucket = Math.floor((afterId + 1) / BUCKET); bucket <= Math.floor(lastId / BUCKET); bucket++) refs.push(`${filter}:${bucket}`);
    return refs;
  }

  function invalidate(change: PetsChange) {
    if (change === 'everything') {
      flush();
      return;
    }
    const filters = new Set([ALL, ...change.statuses.filter((status): status is PetStatus => status !== null)]);
    for (const filter of filters) {
      generations.set(filter, generationOf(filter) + 1);
      const refs = [`${filter}:tail`];
      for (let bucket = Math.floor(change.minId / BUCKET); bucket <= Math.floor(change.maxId / BUCKET); bucket++) refs.push(`${filter}:${bucket}`);
      for (const ref of refs) {
        for (const key of [...(index.get(ref) ?? [])]) {
          const covers = entries.get(key)?.covers;
          // A bucket is only where to look: the page goes if the new ids fall inside what it covers.
          if (covers && change.maxId > covers.afterId && (covers.last || change.minId <= covers.lastId)) remove(key);
        }
      }
    }
  }

  /** Forgets everything, as when notices of changes may have been missed. */
  function flush() {
    entries.clear();
    index.clear();
    bytes = 0;
    for (const filter of [ALL, 'available', 'pending', 'sold', 'pets']) generations.set(filter, generationOf(filter) + 1);
    flights.clear();
  }

  return {
    async create(pet: Parameters<PetsRepository['create']>[0]): Promise<Pet> {
      const created = await repository.create(pet);
      invalidate({ minId: created.id, maxId: created.id, statuses: [created.status ?? null] });
      return created;
    },

    async findById(id: number): Promise<Pet | undefined> {
      const key = `pet:${id}`;
      const cached = lookup<Pet>(key);
      onLookup('pet', cached ? 'hit' : 'miss');
      if (cached) return cached;
      // Pets never change, so no write makes a found pet stale: one generation for all of them.
      return read(key, 'pets', () => repository.findById(id), (pet) => pet && store(key, pet, ENTRY_OVERHEAD + petBytes(pet), []));
    },

    async list(query: ListQuery): Promise<ListPage> {
      const { limit, status, afterId = 0 } = query;
      const filter = filterOf(status);
      const key = `list:${filter}:${afterId}:${limit}`;
      const cached = lookup<ListPage>(key);
      onLookup('list', cached ? 'hit' : 'miss');
      if (cached) return cached;
      return read(
        key,
        filter,
        () => repository.list(query),
        (page) => {
          const covers = coversOf(afterId, page);
          store(key, page, ENTRY_OVERHEAD + page.pets.reduce((sum, pet) => sum + petBytes(pet), 0), refsOf(filter, covers), covers);
        },
      );
    },

    invalidate,
    flush,
    /** Entries and estimated bytes held now. */
    size: () => ({ entries: entries.size, bytes }),
  };
}

export type CachedPetsRepository = ReturnType<typeof cachedPetsRepository>;
