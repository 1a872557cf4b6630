/**
 * One load per key at a time: concurrent callers share the promise of the load under way. A
 * write invalidates a scope (or everything); a load that began before it is then neither joined
 * by later callers nor kept, so nothing read before a write is served after it.
 */
export class SingleFlight<K> {
  readonly #flights = new Map<K, { promise: Promise<unknown>; startedAt: number }>();
  /** Counts invalidations; each scope remembers when it was last invalidated, `#allAt` when everything was. */
  #clock = 0;
  #allAt = 0;
  readonly #scopeAt = new Map<string, number>();

  /**
   * The load of `key` under way in the current generation of `scope`, or a new one. `keep` gets
   * its value only if no invalidation of the scope came while it was under way.
   */
  run<T>(key: K, load: () => Promise<T>, keep: (value: T) => void, scope = ''): Promise<T> {
    const flight = this.#flights.get(key);
    if (flight && this.#current(scope, flight.startedAt)) return flight.promise as Promise<T>;
    const startedAt = this.#clock;
    const promise: Promise<T> = load().then(
      (value) => {
        if (this.#flights.get(key)?.promise === promise) this.#flights.delete(key);
        if (this.#current(scope, startedAt)) keep(value);
        return value;
      },
      (error: unknown) => {
        if (this.#flights.get(key)?.promise === promise) this.#flights.delete(key);
        throw error;
      },
    );
    this.#flights.set(key, { promise, startedAt });
    return promise;
  }

  /** Loads of the scope under way now are no longer joined or kept. */
  invalidate(scope = '') {
    this.#scopeAt.set(scope, ++this.#clock);
  }

  /** No load under way now is joined or kept, whatever its scope. */
  invalidateAll() {
    this.#allAt = ++this.#clock;
    this.#scopeAt.clear();
    this.#flights.clear();
  }

  #current(scope: string, startedAt: number): boolean {
    return this.#allAt <= startedAt && (this.#scopeAt.get(scope) ?? 0) <= startedAt;
  }
}
