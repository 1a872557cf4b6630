import { BloomFilter } from 'bloomfilter';

/** Of the hashes of no stored key, the share the filter takes for a stored one (and so lets reach the database). */
const FALSE_POSITIVE_RATE = 1e-4;
/** A filter holds at least this many keys before it is rebuilt larger: about 240 KB. */
const MIN_CAPACITY = 100_000;
/** Stored keys read per statement while (re)loading. */
const LOAD_PAGE_SIZE = 10_000;
/**
 * Hashes it held that matched no usable key (revoked, expired, or a false positive), as a share of
 * the keys it holds, past which it is rebuilt: reading it again costs at most 100 rows for each
 * lookup it let through for nothing (docs/decisions/key-filter.md).
 */
const REBUILD_AT_FALSE_POSITIVE_SHARE = 0.01;

/** The stored keys a filter is made of: how many are usable, and their hashes (base64) a page at a time, in id order. */
export interface StoredKeys {
  countUsable(): Promise<number>;
  usableHashes(afterId: number, limit: number): Promise<Array<{ id: number; hash: string }>>;
  usableHashesOf(ids: number[]): Promise<Array<{ id: number; hash: string }>>;
}

export interface KeyFilterEvents {
  onError: (error: unknown) => void;
  /**
   * The hashes of the usable keys change notices named, once read: a hash remembered as no key may
   * be one of them. `'*'` when they could not be read, and every stored key was read again instead.
   */
  onLearned: (hashes: string[] | '*') => void;
}

function sizedFor(keys: number) {
  const capacity = Math.max(MIN_CAPACITY, 2 * keys);
  const bits = Math.ceil((-capacity * Math.log(FALSE_POSITIVE_RATE)) / Math.LN2 ** 2);
  return { capacity, bloom: new BloomFilter(bits, Math.round((bits / capacity) * Math.LN2)) };
}

/**
 * Which hashes may be stored keys: a Bloom filter of the usable keys' hashes, about 5 MB per
 * million keys, so a key nobody issued can be refused without a lookup however its address has
 * fared (see v1/pipeline.ts). A Bloom filter cannot forget a key: a revoked or expired one is
 * looked up, refused and remembered as unknown by the key cache, and leaves when the filter is
 * rebuilt, once such lookups add up (REBUILD_AT_FALSE_POSITIVE_SHARE). Until its first load has
 * finished it holds nothing.
 */
export class KeyFilter {
  readonly #keys: StoredKeys;
  readonly #events: KeyFilterEvents;
  #current = sizedFor(0);
  /** Keys added to the current filter. */
  #count = 0;
  /** Hashes the current filter held that matched no usable key. */
  #falsePositives = 0;
  /** The filter a load is filling, and the keys added to it; keys added meanwhile go to it too. */
  #next: { sized: ReturnType<typeof sizedFor>; count: number } | undefined;
  #loading: Promise<void> | undefined;
  #loadAgain = false;
  /** Ids of changed keys not read yet, and the reading of them under way. */
  readonly #unread = new Set<number>();
  #learning: Promise<void> | undefined;
  #stopped = false;

  constructor(keys: StoredKeys, events: KeyFilterEvents) {
    this.#keys = keys;
    this.#events = events;
  }

  mayHold(hash: string): boolean {
    return this.#current.bloom.test(hash);
  }

  /** A hash it held matched no usable key when looked up: past a share of its keys, it is rebuilt without them. */
  heldNoKey() {
    if (++this.#falsePositives > this.#count * REBUILD_AT_FALSE_POSITIVE_SHARE && !this.#loading) void this.reload();
  }

  add(hash: string) {
    this.#current.bloom.add(hash);
    if (this.#next) {
      this.#next.sized.bloom.add(hash);
      this.#next.count += 1;
    }
    if (++this.#count > this.#current.capacity) void this.reload();
  }

  /**
   * Adds the keys change notices name, as far as they are usable. Notices can come by the thousand
   * (a transaction of one-row statements sends one each at its commit), so their ids are read
   * together, one statement at a time; past a page's worth, or when a read fails, everything is reloaded.
   */
  learn(ids: number[]): Promise<void> {
    for (const id of ids) this.#unread.add(id);
    this.#learning ??= this.#readUnread().finally(() => (this.#learning = undefined));
    return this.#learning;
  }

  async #readUnread() {
    while (this.#unread.size > 0 && !this.#stopped) {
      const ids = [...this.#unread];
      this.#unread.clear();
      try {
        if (ids.length > LOAD_PAGE_SIZE) await this.#reloadForNew();
        else {
          const hashes = (await this.#keys.usableHashesOf(ids)).map(({ hash }) => hash);
          for (const hash of hashes) this.add(hash);
          this.#events.onLearned(hashes);
        }
      } catch (error) {
        this.#events.onError(error);
        await this.#reloadForNew();
      }
    }
  }

  async #reloadForNew() {
    await this.reload();
    this.#events.onLearned('*');
  }

  /**
   * Reads every stored key again, in the background, into a filter sized for them, which then
   * replaces this one: at start, after a change too large to name its keys, when notices may have
   * been lost, and once keys that left it add up. Asked during a load, another follows it.
   */
  reload(): Promise<void> {
    if (this.#stopped) return Promise.resolve();
    if (this.#loading) {
      this.#loadAgain = true;
      return this.#loading;
    }
    this.#loading = this.#load()
      .catch(this.#events.onError)
      .finally(() => {
        this.#loading = undefined;
        this.#next = undefined;
        if (this.#loadAgain && !this.#stopped) {
          this.#loadAgain = false;
          void this.reload();
        }
      });
    return this.#loading;
  }

  /** Resolves once the keys of every notice handed to it so far have been read, and every load asked for so far has finished. */
  async settled() {
    while (this.#learning || this.#loading) await Promise.all([this.#learning, this.#loading]);
  }

  /** Stops loading (between two pages) and waits for the load under way, before the database closes. */
  async stop() {
    this.#stopped = true;
    await Promise.all([this.#loading, this.#learning]);
  }

  async #load() {
    const next = { sized: sizedFor(await this.#keys.countUsable()), count: 0 };
    this.#next = next;
    for (let afterId = 0; !this.#stopped;) {
      const page = await this.#keys.usableHashes(afterId, LOAD_PAGE_SIZE);
      for (const { hash } of page) next.sized.bloom.add(hash);
      next.count += page.length;
      if (page.length < LOAD_PAGE_SIZE) {
        this.#current = next.sized;
        this.#count = next.count;
        this.#falsePositives = 0;
        return;
      }
      afterId = page.at(-1)!.id;
    }
  }
}
