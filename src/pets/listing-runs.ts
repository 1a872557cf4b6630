import type { Lru } from '../platform/lib/lru.js';
import type { ListPage, ListQuery } from './repository.js';
import type { Pet } from './schemas.js';

/**
 * What is known of one listing (all pets, or those of one status): every pet with an id after
 * `afterId` up to `lastId` is in `pets`, in id order. When `toEnd`, the read reached the end of
 * the listing and no pet follows; otherwise at least one does (a page is read with one row more).
 */
export interface Run {
  filter: string;
  afterId: number;
  lastId: number;
  toEnd: boolean;
  pets: Pet[];
  bytes: number;
  expiresAt: number;
}

/** Estimated bytes of a run or pet entry besides its pets, and of a pet besides its name. */
export const ENTRY_OVERHEAD = 200;
const PET_OVERHEAD = 100;
export const petBytes = (pet: Pet) => PET_OVERHEAD + pet.name.length * 2;

/** Index of the first pet with an id above `id`. */
function firstAfter(pets: Pet[], id: number): number {
  let low = 0;
  let high = pets.length;
  while (low < high) {
    const middle = (low + high) >>> 1;
    if (pets[middle]!.id <= id) low = middle + 1;
    else high = middle;
  }
  return low;
}

/**
 * The pages of listings the pets cache (pets-cache.ts) knows, as runs: pages that meet or touch
 * are merged, and a page that falls inside a run is answered from it, whatever its cursor and
 * limit. Each run is weighed in the cache's `age`, which evicts what is oldest of everything the
 * cache holds and hands back the runs it evicts (`unlist`).
 */
export class ListingRuns {
  /** Runs of each listing, ordered by afterId, never overlapping. */
  readonly #runs = new Map<string, Run[]>();
  readonly #age: Lru<Run | Pet, undefined>;
  readonly #ttlMs: number;
  readonly #now: () => number;

  constructor(age: Lru<Run | Pet, undefined>, { ttlMs, now }: { ttlMs: number; now: () => number }) {
    this.#age = age;
    this.#ttlMs = ttlMs;
    this.#now = now;
  }

  /** Adds what a page read learned, merged with the runs it meets or touches. */
  learn(filter: string, afterId: number, page: Pet[], toEnd: boolean) {
    let run: Run = {
      filter,
      afterId,
      lastId: page.at(-1)?.id ?? afterId,
      toEnd,
      pets: page,
      bytes: 0,
      expiresAt: this.#now() + this.#ttlMs,
    };
    const list = this.#of(filter);
    for (const other of [...list]) {
      const meets = other.afterId <= (run.toEnd ? Infinity : run.lastId) && run.afterId <= (other.toEnd ? Infinity : other.lastId);
      if (!meets) continue;
      this.#forget(other);
      const [first, second] = other.afterId <= run.afterId ? [other, run] : [run, other];
      const later = second.lastId >= first.lastId ? second : first;
      run = {
        filter,
        afterId: first.afterId,
        lastId: later.lastId,
        toEnd: later.toEnd,
        pets: [
          ...first.pets.slice(0, firstAfter(first.pets, second.afterId)),
          ...second.pets,
          ...first.pets.slice(firstAfter(first.pets, second.lastId)),
        ],
        bytes: 0,
        expiresAt: Math.min(first.expiresAt, second.expiresAt),
      };
    }
    run.bytes = ENTRY_OVERHEAD + run.pets.reduce((sum, pet) => sum + petBytes(pet), 0);
    if (!this.#age.set(run, undefined, run.bytes)) return;
    const updated = this.#of(filter);
    const before = updated.findIndex((other) => other.afterId > run.afterId);
    updated.splice(before === -1 ? updated.length : before, 0, run);
    this.#runs.set(filter, updated);
  }

  /** The page from what is known, or undefined when the runs cannot tell. */
  answer(filter: string, { limit, afterId = 0 }: ListQuery): ListPage | undefined {
    const run = this.#of(filter).find((candidate) => candidate.afterId <= afterId && (candidate.toEnd || afterId < candidate.lastId));
    if (!run) return undefined;
    if (run.expiresAt <= this.#now()) {
      this.#forget(run);
      return undefined;
    }
    const from = firstAfter(run.pets, afterId);
    const remaining = run.pets.length - from;
    if (remaining > limit || (remaining === limit && !run.toEnd)) {
      const page = run.pets.slice(from, from + limit);
      return { pets: page, nextAfterId: page.at(-1)!.id };
    }
    return run.toEnd ? { pets: run.pets.slice(from) } : undefined;
  }

  /** Pets with ids from minId to maxId were added to the listing: the runs they fall among are forgotten. */
  added(filter: string, { minId, maxId }: { minId: number; maxId: number }) {
    for (const run of [...this.#of(filter)]) {
      if (maxId <= run.afterId) continue;
      // Pets added after all a run knows leave what it knows true, but it no longer reaches the end.
      if (minId > run.lastId) run.toEnd = false;
      else this.#forget(run);
    }
  }

  /** Takes a run out of its listing; `age` has forgotten it, or is told by the caller. */
  unlist(run: Run) {
    const list = this.#of(run.filter);
    const at = list.indexOf(run);
    if (at !== -1) list.splice(at, 1);
  }

  clear() {
    this.#runs.clear();
  }

  #of(filter: string) {
    return this.#runs.get(filter) ?? [];
  }

  #forget(run: Run) {
    this.unlist(run);
    this.#age.delete(run);
  }
}
