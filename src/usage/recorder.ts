import type { FastifyBaseLogger } from 'fastify';
import type { ApiKeyIdentity } from '../api-keys/identity.js';
import { pruneInBatches } from '../platform/lib/prune-in-batches.js';
import { WriteBehind } from '../platform/lib/write-behind.js';
import type { RefusalKind, UsageEntry, UsageRepository } from './repository.js';
import { DAY_MS, HOUR_MS, MINUTE_MS } from '../platform/time.js';

/** What the record keeps of a request's key: its id, and its customer's (a key's customer never changes). */
type UsageKey = Pick<ApiKeyIdentity, 'id' | 'customerId'>;

/** How often an instance writes what it counted: the record's lag behind the requests. */
const FLUSH_EVERY_MS = 1_000;
/** How often, by the app's clock, an instance deletes the hours past the retention. */
const PRUNE_EVERY_MS = MINUTE_MS;
/** Rows one statement deletes at most, so that no prune holds many rows (or the database) for long. */
const PRUNE_BATCH = 1_000;

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
 * One write at a time; a write that fails puts its counts back, for the next one (WriteBehind).
 * Beside the writes, once per PRUNE_EVERY_MS of the app's clock, it deletes the hours past the retention.
 */
export class UsageRecorder {
  readonly #usage: UsageRepository;
  readonly #options: RecorderOptions;
  readonly #counts: WriteBehind<UsageEntry>;
  #pruneTimer: NodeJS.Timeout | undefined;
  #pruning: Promise<void> | undefined;
  #nextPruneAt = 0;
  #stopped = false;

  constructor(usage: UsageRepository, options: RecorderOptions) {
    this.#usage = usage;
    this.#options = options;
    this.#counts = new WriteBehind<UsageEntry>({
      everyMs: FLUSH_EVERY_MS,
      write: (entries) => usage.add(entries),
      merge: addTo,
      failed: (error, entries) =>
        options.log.warn(
          { err: error, entries: entries.length },
          'usage: writing the usage record failed; its counts are kept for the next write',
        ),
    });
  }

  start() {
    this.#counts.start();
    this.#pruneTimer = setInterval(() => this.#pruneWhenDue(), FLUSH_EVERY_MS).unref();
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
    return this.#counts.flush();
  }

  /** Stops the timers and the prune, and writes what is left (the app's close, once no request is in flight). */
  async stop() {
    this.#stopped = true;
    clearInterval(this.#pruneTimer);
    await Promise.all([this.#pruning, this.#counts.close()]);
  }

  #entry({ id: keyId, customerId }: UsageKey, operation: string, at: number): UsageEntry {
    const hour = Math.floor(at / HOUR_MS) * HOUR_MS;
    return this.#counts.entry(`${hour} ${keyId} ${operation}`, () => ({
      hour,
      keyId,
      customerId,
      operation,
      requests: 0,
      units: 0,
      refused: { rateLimited: 0, concurrency: 0, credits: 0, banned: 0 },
    }));
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
