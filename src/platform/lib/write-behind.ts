export interface WriteBehindOptions<T> {
  /** Writes a batch in one statement: all of it or nothing, as a failed write keeps the whole batch for the next. */
  write: (batch: T[]) => Promise<void>;
  /** Adds the counts of `from` to `into`: a failed batch's entry to the one counted since under its name. */
  merge: (into: T, from: T) => void;
  /** Told of a write that failed, whose batch is kept for the next. */
  failed: (error: unknown, batch: T[]) => void;
  /** How often the timer writes what was counted, once started. */
  everyMs: number;
  /** Whether an entry has anything to write (units spent then given back have not); all have, when not told. */
  worthWriting?: (entry: T) => boolean;
}

/**
 * Counts kept in memory, one entry per name, and written behind in batches: every `everyMs` on an
 * unref'd timer (a tick is skipped while a write is under way: the next one takes both) and at
 * close. One write at a time; a write that fails puts its counts back, added to what came since.
 */
export class WriteBehind<T> {
  readonly #options: WriteBehindOptions<T>;
  #counts = new Map<string, T>();
  #timer: NodeJS.Timeout | undefined;
  /** The write, or the owner's work between writes, under way if any: one at a time. */
  #busy: Promise<void> | undefined;

  constructor(options: WriteBehindOptions<T>) {
    this.#options = options;
  }

  start() {
    this.#timer = setInterval(() => {
      if (!this.#busy) void this.flush();
    }, this.#options.everyMs).unref();
  }

  /** The entry counted under `name` since the last write, made by `create` if there is none: the caller adds to it. */
  entry(name: string, create: () => T): T {
    let entry = this.#counts.get(name);
    if (!entry) {
      entry = create();
      this.#counts.set(name, entry);
    }
    return entry;
  }

  /** What is counted under `name` and not written yet; exact only between writes (`betweenWrites`). */
  unwritten(name: string): T | undefined {
    return this.#counts.get(name);
  }

  /** Writes what was counted until now, after the write under way if there is one. */
  flush(): Promise<void> {
    return this.betweenWrites(() => this.#write());
  }

  /** Runs `work` once no write (nor other work) is under way, holding off the next write until it ends. */
  async betweenWrites<R>(work: () => Promise<R>): Promise<R> {
    while (this.#busy) await this.#busy;
    const running = work();
    const busy = running.then(
      () => undefined,
      () => undefined,
    );
    this.#busy = busy;
    void busy.then(() => {
      if (this.#busy === busy) this.#busy = undefined;
    });
    return running;
  }

  /** Stops the timer and writes what is left. */
  async close() {
    clearInterval(this.#timer);
    await this.flush();
  }

  async #write() {
    const { write, merge, failed, worthWriting = () => true } = this.#options;
    const batch = [...this.#counts].filter(([, entry]) => worthWriting(entry));
    this.#counts = new Map();
    if (batch.length === 0) return;
    try {
      await write(batch.map(([, entry]) => entry));
    } catch (error) {
      // Nothing of the batch was written (one statement): its counts wait for the next write.
      for (const [name, entry] of batch) {
        const since = this.#counts.get(name);
        if (since) merge(since, entry);
        else this.#counts.set(name, entry);
      }
      failed(
        error,
        batch.map(([, entry]) => entry),
      );
    }
  }
}
