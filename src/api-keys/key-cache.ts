import { Lru } from '../platform/lib/lru.js';
import { SingleFlight } from '../platform/lib/single-flight.js';
import type { ApiKeyIdentity } from './identity.js';
import type { ApiKeysRepository } from './repository.js';
import { MINUTE_MS } from '../platform/time.js';

/** What changed: the keys of these ids; the keys of a customer (its limits or balance); or, for `*`, any number of keys. */
export type ApiKeysChange = number[] | { customerId: number } | '*';

const CUSTOMER_CHANGE = 'customer:';

/**
 * A notice on the api_key_changed channel: the changed key ids, comma separated (migrations/006),
 * `customer:<id>` for a change of a customer's limits or balance (migrations/018), or `*` for many keys.
 */
export const parseApiKeysChange = (payload: string): ApiKeysChange => {
  if (payload === '*') return '*';
  if (payload.startsWith(CUSTOMER_CHANGE)) return { customerId: Number(payload.slice(CUSTOMER_CHANGE.length)) };
  return payload.split(',').map(Number);
};

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
const UNKNOWN_TTL_MS = MINUTE_MS;

interface Entry {
  /** Undefined for a hash that matched no usable key. */
  identity: ApiKeyIdentity | undefined;
  expiresAt: number;
  /** The key as presented, for a usable one: in memory only, and only as long as its entry. */
  key?: string;
}

/**
 * The keys recently used on this instance, by hash, filled on first use from the database and
 * bounded by configuration: the least recently used go first. A cached key costs two map lookups,
 * never a round trip: its hash is computed once, on its first use, and known by the key as
 * presented while its entry is held (docs/decisions/key-hash-memo.md). Changes arrive as notices naming key ids (or "everything"),
 * from the api_keys trigger (migrations/006), whoever made them; a read that a change overtook
 * is not kept, so a revocation is never undone by a lookup already under way.
 */
export class KeyCache {
  readonly #keys: ApiKeysRepository;
  readonly #now: () => number;
  readonly #entries: Lru<string, Entry>;
  readonly #hashById = new Map<number, string>();
  /** The hashes of the usable keys held of each customer: a change of the customer reaches them alone. */
  readonly #hashesByCustomer = new Map<number, Set<string>>();
  /** The hash of each usable key held, by the key as presented. */
  readonly #hashByKey = new Map<string, string>();
  /** The entries of hashes that matched no usable key: the ones a new key may turn valid. */
  readonly #unknown = new Set<string>();
  readonly #flights = new SingleFlight<string>();

  constructor(keys: ApiKeysRepository, { maxEntries, now }: KeyCacheOptions) {
    this.#keys = keys;
    this.#now = now;
    this.#entries = new Lru(maxEntries, { onEvict: (hash, entry) => this.#unindex(hash, entry) });
  }

  /**
   * What the cache knows of a hash, now the most recently used: a usable key, `null` for no usable
   * key, `'stale'` for a key that was usable when last looked up and must be looked up again, or
   * undefined when not known (never looked up, or forgotten).
   */
  get(hash: string): ApiKeyIdentity | null | 'stale' | undefined {
    const entry = this.#entries.get(hash);
    if (!entry) return undefined;
    if (entry.expiresAt <= this.#now()) {
      // Kept until its lookup replaces it: a re-check is no guess, and spends no address's budget for unknown keys.
      if (entry.identity) return 'stale';
      this.#forget(hash);
      return undefined;
    }
    return entry.identity ?? null;
  }

  /** The hash of a presented key held as usable (stale ones included), without hashing it again. */
  knownHash(key: string): string | undefined {
    return this.#hashByKey.get(key);
  }

  /**
   * Looks a hash up in the database, once however many requests ask at the same time. `key`, the
   * key presented with that hash, is what knownHash answers by while it is held.
   */
  lookUp(hash: string, key: string): Promise<ApiKeyIdentity | undefined> {
    return this.#flights.run(
      hash,
      () => this.#keys.findUsable(hash),
      (identity) => this.#remember(hash, identity, key),
    );
  }

  /** Forgets the keys a change names (a customer's: those of it held here); everything for "*" (a bulk change, or a lost listener). */
  invalidate(change: ApiKeysChange) {
    this.#flights.invalidateAll();
    if (change === '*') {
      this.#entries.clear();
      this.#hashById.clear();
      this.#hashByKey.clear();
      this.#hashesByCustomer.clear();
      this.#unknown.clear();
      return;
    }
    const hashes = Array.isArray(change)
      ? change.map((id) => this.#hashById.get(id))
      : [...(this.#hashesByCustomer.get(change.customerId) ?? [])];
    // A changed key is looked up again on its next use, as a re-check (see get).
    for (const hash of hashes) if (hash !== undefined) this.#entries.peek(hash)!.expiresAt = 0;
  }

  /**
   * Forgets the hashes remembered as no usable key that now are keys: those the key filter read
   * for the keys a change named (everything remembered as unknown for "*"). Only those: a notice
   * of some other key's change leaves a revoked key's hash remembered, and so not looked up again.
   */
  forgetUnknown(hashes: string[] | '*') {
    for (const hash of hashes === '*' ? this.#unknown : hashes) if (this.#unknown.has(hash)) this.#forget(hash);
  }

  get size(): number {
    return this.#entries.size;
  }

  #remember(hash: string, identity: ApiKeyIdentity | undefined, key: string) {
    this.#forget(hash);
    if (identity) {
      this.#entries.set(hash, { identity, expiresAt: this.#now() + KNOWN_TTL_MS, key });
      this.#hashById.set(identity.id, hash);
      this.#hashByKey.set(key, hash);
      if (identity.customerId !== null) {
        let hashes = this.#hashesByCustomer.get(identity.customerId);
        if (!hashes) this.#hashesByCustomer.set(identity.customerId, (hashes = new Set()));
        hashes.add(hash);
      }
    } else {
      this.#entries.set(hash, { identity, expiresAt: this.#now() + UNKNOWN_TTL_MS });
      this.#unknown.add(hash);
    }
  }

  #forget(hash: string) {
    const entry = this.#entries.peek(hash);
    if (!entry) return;
    this.#entries.delete(hash);
    this.#unindex(hash, entry);
  }

  /** Drops a forgotten entry from the indexes beside the entries. */
  #unindex(hash: string, entry: Entry) {
    if (entry.key !== undefined) this.#hashByKey.delete(entry.key);
    if (!entry.identity) return void this.#unknown.delete(hash);
    if (this.#hashById.get(entry.identity.id) === hash) this.#hashById.delete(entry.identity.id);
    const { customerId } = entry.identity;
    const ofCustomer = customerId === null ? undefined : this.#hashesByCustomer.get(customerId);
    if (ofCustomer?.delete(hash) && ofCustomer.size === 0) this.#hashesByCustomer.delete(customerId!);
  }
}
