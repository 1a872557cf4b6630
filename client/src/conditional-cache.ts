/** A held answer of a read: revalidated with If-None-Match, reused on 304. */
export interface HeldAnswer {
  etag: string;
  body: string;
}

/** The copies of reads a client holds, by URL; the least recently used goes first when full. */
export class ConditionalCache {
  readonly #entries = new Map<string, HeldAnswer>();

  constructor(readonly maxEntries: number) {}

  get(url: string): HeldAnswer | undefined {
    const held = this.#entries.get(url);
    if (held) {
      // A Map keeps insertion order: re-inserting makes this the most recently used.
      this.#entries.delete(url);
      this.#entries.set(url, held);
    }
    return held;
  }

  set(url: string, held: HeldAnswer): void {
    this.#entries.delete(url);
    this.#entries.set(url, held);
    if (this.#entries.size > this.maxEntries) this.#entries.delete(this.#entries.keys().next().value!);
  }

  delete(url: string): void {
    this.#entries.delete(url);
  }
}
