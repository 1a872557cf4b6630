import type { FastifyBaseLogger } from 'fastify';
import type { ApiKeyIdentity } from '../api-keys/identity.js';
import { pruneInBatches } from '../platform/lib/prune-in-batches.js';
import type { RefusalKind, UsageEntry, UsageRepository } from './repository.js';

/** What the record keeps of a request's key: its id, and its customer's (a key's customer never changes). */
type UsageKey = Pick<ApiKeyIdentity, 'id' | 'customerId'>;

/** How often an instance writes what it counted: the record's lag behind the requests. */
const FLUSH_EVERY_MS = 1_000;
/** How often, by the app's clock, an instance deletes the hours past the retention. */
const PRUNE_EVERY_MS = 60_000;
/** Rows one statement deletes at most, so that no prune holds many rows (or the database) for long. */
const PRUNE_BATCH = 1_000;
const HOUR_MS = 3_600_000;
const DAY_MS = 86_400_000;

export interface RecorderOptions {
  /** Days an hour of usage is kept (USAGE_RETENTION_DAYS). */
  retentionDays: number;
  /** The app's clock: the hour a request counts in, and the retention (tests move it). */
  now: () => number;
  log: FastifyBaseLogger;
}

/** Adds an entry's counts to another's. */
function addTo(target: UsageEntry, { requests, units, refused }: UsageEntry) {
  target.requests += requests;
  target.units += units;
  for (const kind in refused) target.refused[kind as RefusalKind] += refused[kind as RefusalKind];
}

/**
 * Counts requests in memory per hour, key and operation, and adds the counts to the record in one
 * statement each FLUSH_EVERY_MS and at stop: instances add up, as each adds only what it counted.
 * One write at a time; a write that fails puts its counts back, for the next one. Beside the
 * writes, once per PRUNE_EVERY_MS of the app's clock, it deletes the hours past the retention.
 */
export class UsageRecorder {
  readonly #usage: UsageRepository;
  readonly #options: RecorderOptions;
  #counts = new Map<string, UsageEntry>();
  #timer: NodeJS.Timeout | undefined;
  #flushing: Promise<void> | undefined;
  #pruning: Promise<void> | undefined;
  #nextPruneAt = 0;
  #stopped = false;

  constructor(usage: UsageRepository, options: RecorderOptions) {
    this.#usage = usage;
    this.#options = options;
  }

  start() {
    this.#timer = setInterval(() => {
      this.#pruneWhenDue();
      // A write still under way (a slow database) is not joined by another: the next tick takes both seconds.
      if (!this.#flushing) void this.flush();
    }, FLUSH_EVERY_MS).unref();
  }

  /**
   * A request of the key served: it spent `units` (0 for a free revalidation, or an operation of cost 0).
   * `operation` is the route's operationId, none for a request that matched none. It counts in the hour
   * `admittedAt` (by the app's clock) falls in: where its units were spent, whenever it was answered.
   */
  served(key: UsageKey, operation: string | undefined, units: number, admittedAt: number) {
    const entry = this.#entry(key, operation ?? '', admittedAt);
    entry.requests++;
    entry.units += units;
  }

  refused(key: UsageKey, operation: string | undefined, kind: RefusalKind) {
    this.#entry(key, operation ?? '', this.#options.now()).refused[kind]++;
  }

  /** Writes what was counted until now, after the write under way if there is one. */
  flush(): Promise<void> {
    const after = this.#flushing ?? Promise.resolve();
    const flushing = after.then(() => this.#write());
    this.#flushing = flushing;
    void flushing.finally(() => {
      if (this.#flushing === flushing) this.#flushing = undefined;
    });
    return flushing;
  }

  /** Stops the timer and the prune, and writes what is left (the app's close, once no request is in flight). */
  async stop() {
    this.#stopped = true;
    clearInterval(this.#timer);
    await Promise.all([this.#pruning, this.flush()]);
  }

  #entry({ id: keyId, customerId }: UsageKey, operation: string, at: number): UsageEntry {
    const hour = Math.floor(at / HOUR_MS) * HOUR_MS;
    const id = `${hour} ${keyId} ${operation}`;
    let entry = this.#counts.get(id);
    if (!entry) {
      entry = {
        hour,
        keyId,
        customerId,
        operation,
        requests: 0,
        units: 0,
        refused: { rateLimited: 0, concurrency: 0, credits: 0, banned: 0 },
      };
      this.#counts.set(id, entry);
    }
    return entry;
  }

  async #write() {
    if (this.#counts.size === 0) return;
    const batch = this.#counts;
    this.#counts = new Map();
    try {
      await this.#usage.add([...batch.values()]);
    } catch (error) {
      // Nothing of the batch was written (one statement): its counts wait for the next write, added to what came since.
      for (const [id, entry] of batch) {
        const since = this.#counts.get(id);
        if (since) addTo(entry, since);
        this.#counts.set(id, entry);
      }
      this.#options.log.warn(
        { err: error, entries: batch.size },
        'usage: writing the usage record failed; its counts are kept for the next write',
      );
    }
  }

  #pruneWhenDue() {
    const now = this.#options.now();
    if (this.#pruning || now < this.#nextPruneAt) return;
    this.#nextPruneAt = now + PRUNE_EVERY_MS;
    const { log, retentionDays } = this.#options;
    const before = new Date(now - retentionDays * DAY_MS);
    this.#pruning = pruneInBatches(
      (batch) => this.#usage.prune(before, batch),
      PRUNE_BATCH,
      () => this.#stopped,
    )
      .then(
        (pruned) => {
          if (pruned > 0) log.info({ pruned }, 'usage: hours past their retention deleted');
        },
        (error: unknown) => log.warn({ err: error }, 'usage: deleting the hours past their retention failed; trying again in a minute'),
      )
      .finally(() => (this.#pruning = undefined));
  }
}
