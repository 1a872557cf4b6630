import type { ApiKeyIdentity, ApiKeysRepository } from './repositories/api-keys.js';

export interface KeyCacheOptions {
  /** Keys (and unknown hashes) held at most: memory follows this, not the number of keys. */
  maxEntries: number;
  now: () => number;
}

/**
 * How long a known key is trusted without a notice: the bound on a change missed while the
 * listening connection was down and not yet back (once back, everything is forgotten anyway).
 */
const KNOWN_TTL_MS = 300_000;
/** How long a hash that matched no usable key is remembered: a repeated wrong key costs one lookup per minute. */
const UNKNOWN_TTL_MS = 60_000;

interface Entry {
  /** Undefined for a hash that matched no usable key. */
  identity: ApiKeyIdentity | undefined;
  expiresAt: number;
}

/**
 * The keys recently used on this instance, by hash, filled on first use from the database and
 * bounded by configuration: the least recently used go first. A cached key costs a hash and a
 * map lookup, never a round trip. Changes arrive as notices naming key ids (or "everything"),
 * from the api_keys trigger (migrations/006), whoever made them; a read that a change overtook
 * is not kept, so a revocation is never undone by a lookup already under way.
 */
export class KeyCache {
  readonly #keys: ApiKeysRepository;
  readonly #maxEntries: number;
  readonly #now: () => number;
  readonly #entries = new Map<string, Entry>();
  readonly #hashById = new Map<number, string>();
  /** The entries of hashes that matched no usable key: the ones any new key may turn valid. */
  readonly #unknown = new Set<string>();
  readonly #flights = new Map<string, Promise<ApiKeyIdentity | undefined>>();
  #generation = 0;

  constructor(keys: ApiKeysRepository, { maxEntries, now }: KeyCacheOptions) {
    this.#keys = keys;
    this.#maxEntries = maxEntries;
    this.#now = now;
  }

  /** What the cache knows of a hash: a usable key, `null` for no usable key, or undefined when it must be looked up. */
  peek(hash: string): ApiKeyIdentity | null | undefined {
    const entry = this.#entries.get(hash);
    if (!entry) return undefined;
    if (entry.expiresAt <= this.#now()) {
      this.#forget(hash);
      return undefined;
    }
    // Most recently used last: the first entry is the one to go.
    this.#entries.delete(hash);
    this.#entries.set(hash, entry);
    return entry.identity ?? null;
  }

  /** Looks a hash up in the database, once however many requests ask at the same time. */
  lookUp(hash: string): Promise<ApiKeyIdentity | undefined> {
    const flight = this.#flights.get(hash);
    if (flight) return flight;
    const generation = this.#generation;
    const promise: Promise<ApiKeyIdentity | undefined> = this.#keys
      .findUsable(hash)
      .then((identity) => {
        if (generation === this.#generation) this.#remember(hash, identity);
        return identity;
      })
      .finally(() => {
        if (this.#flights.get(hash) === promise) this.#flights.delete(hash);
      });
    this.#flights.set(hash, promise);
    return promise;
  }

  /** Forgets the keys a change names; everything for "*" (a bulk change, or a lost listener). */
  invalidate(ids: number[] | '*') {
    this.#generation++;
    this.#flights.clear();
    if (ids === '*') {
      this.#entries.clear();
      this.#hashById.clear();
      this.#unknown.clear();
      return;
    }
    for (const id of ids) {
      const hash = this.#hashById.get(id);
      if (hash !== undefined) this.#forget(hash);
    }
    // A new key may carry a hash remembered as unknown. Only those are visited, never every
    // entry: a transaction of many one-row statements delivers a notice for each at its commit,
    // and a scan of the whole cache per notice stalled the process for notices x entries.
    for (const hash of this.#unknown) this.#forget(hash);
  }

  get size(): number {
    return this.#entries.size;
  }

  #remember(hash: string, identity: ApiKeyIdentity | undefined) {
    this.#forget(hash);
    while (this.#entries.size >= this.#maxEntries) {
      const oldest = this.#entries.keys().next();
      if (oldest.done) return;
      this.#forget(oldest.value);
    }
    this.#entries.set(hash, { identity, expiresAt: this.#now() + (identity ? KNOWN_TTL_MS : UNKNOWN_TTL_MS) });
    if (identity) this.#hashById.set(identity.id, hash);
    else this.#unknown.add(hash);
  }

  #forget(hash: string) {
    const entry = this.#entries.get(hash);
    if (!entry) return;
    this.#entries.delete(hash);
    if (!entry.identity) this.#unknown.delete(hash);
    else if (this.#hashById.get(entry.identity.id) === hash) this.#hashById.delete(entry.identity.id);
  }
}
