/**
 * A bounded map that forgets its least recently used entries first. Each entry weighs something
 * (1 unless told: then the bound is a count), and the total never exceeds `maxWeight`.
 * Hand-written rather than toad-cache: that one bounds only a count and tells no one what it
 * evicts, where the pets cache is bounded in bytes and the key cache keeps indexes beside it.
 */
const NONE = Symbol('none');

export class Lru<K, V> {
  readonly #maxWeight: number;
  readonly #onEvict: (key: K, value: V) => void;
  /** In use order, least recent first: a Map iterates in insertion order, and a use reinserts. */
  readonly #entries = new Map<K, { value: V; weight: number }>();
  #weight = 0;
  /** The most recently used key: using it again leaves the order as it is, so a run of hits on one key costs no reinsertion. */
  #newest: K | typeof NONE = NONE;

  /** `onEvict` hears of the entries forgotten to make room, not of those deleted or cleared. */
  constructor(maxWeight: number, { onEvict = () => {} }: { onEvict?: (key: K, value: V) => void } = {}) {
    this.#maxWeight = maxWeight;
    this.#onEvict = onEvict;
  }

  /** The value, now the most recently used. */
  get(key: K): V | undefined {
    const entry = this.#entries.get(key);
    if (!entry) return undefined;
    if (key !== this.#newest) {
      this.#entries.delete(key);
      this.#entries.set(key, entry);
      this.#newest = key;
    }
    return entry.value;
  }

  /** The value, leaving its place in the order as it was. */
  peek(key: K): V | undefined {
    return this.#entries.get(key)?.value;
  }

  /**
   * Holds the value as the most recently used, forgetting the least recent until it fits; a value
   * heavier than the bound is not held at all (and false is returned).
   */
  set(key: K, value: V, weight = 1): boolean {
    this.delete(key);
    if (weight > this.#maxWeight) return false;
    this.#entries.set(key, { value, weight });
    this.#newest = key;
    this.#weight += weight;
    for (const [oldestKey, oldest] of this.#entries) {
      if (this.#weight <= this.#maxWeight) break;
      this.#entries.delete(oldestKey);
      this.#weight -= oldest.weight;
      this.#onEvict(oldestKey, oldest.value);
    }
    return true;
  }

  delete(key: K): boolean {
    const entry = this.#entries.get(key);
    if (!entry) return false;
    this.#entries.delete(key);
    this.#weight -= entry.weight;
    if (key === this.#newest) this.#newest = NONE;
    return true;
  }

  clear() {
    this.#entries.clear();
    this.#weight = 0;
    this.#newest = NONE;
  }

  /** Entries held. */
  get size(): number {
    return this.#entries.size;
  }

  /** Their total weight. */
  get weight(): number {
    return this.#weight;
  }

  /** Keys and values, least recently used first; deleting the current entry while iterating is safe. */
  *entries(): IterableIterator<[K, V]> {
    for (const [key, { value }] of this.#entries) yield [key, value];
  }
}
