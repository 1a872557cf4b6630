import type { FastifyBaseLogger } from 'fastify';
import type { Database, Queryable } from '../platform/db/database.js';
import { HOUR_MS } from '../platform/time.js';
import { usageExports, type ExportedHour } from './export-repository.js';

/** How often each instance looks for closed hours to send: an hour is sent within about this long of its delay. */
const EXPORT_EVERY_MS = 1_000;
/** Rows of the record one pass marks at most; more are taken by the next passes. */
const EXPORT_BATCH = 5_000;

/**
 * Records the events of hours sent in the transaction that decided their revisions (the webhooks' usage.hourly events);
 * `sendId` makes a backfill's re-sends events of their own, even at an unchanged revision.
 */
export type RecordExportedHours = (tx: Queryable, hours: ExportedHour[], sendId?: string) => Promise<void>;

export interface ExporterOptions {
  /** How long after an hour closes it is sent (USAGE_EXPORT_DELAY_SECONDS). */
  delayMs: number;
  /** The app's clock: when an hour closed (tests move it). */
  now: () => number;
  log: FastifyBaseLogger;
  exported: RecordExportedHours;
  /** Each pass's outcome (a metric): events sent, nothing new, the lock held by another instance's pass, or failed. */
  onPass: (outcome: PassOutcome) => void;
}

export type PassOutcome = 'sent' | 'idle' | 'locked' | 'failed';

/**
 * Sends each closed hour of the usage record once its delay passed: every instance looks each second, and the one that
 * takes the export's lock marks the rows written since the last pass, sums their customers' (or keys') hours, and records
 * the events of those whose totals are new or changed, all in one transaction. A late write marks its row again, so its
 * hour is summed again and sent at the next revision.
 */
export class UsageExporter {
  readonly #db: Database;
  readonly #options: ExporterOptions;
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;
  /** The first hour the export sends by itself, once read. */
  #since: Date | undefined;
  /** Told once per run of failures (a database outage), not once a second. */
  #failing = false;

  constructor(db: Database, options: ExporterOptions) {
    this.#db = db;
    this.#options = options;
  }

  /** Starts the passes, the first now: the first instance to export decides, by its clock as it starts, where the export starts. */
  start() {
    this.#timer = setInterval(() => this.#tick(), EXPORT_EVERY_MS).unref();
    this.#tick();
  }

  async stop() {
    clearInterval(this.#timer);
    await this.#running;
  }

  #tick() {
    // One pass at a time: a slow database makes the next tick wait, not pile up.
    this.#running ??= this.#pass()
      .then(
        (outcome) => {
          this.#options.onPass(outcome);
          if (this.#failing) this.#options.log.info('usage: exporting the closed hours works again');
          this.#failing = false;
        },
        (error: unknown) => {
          this.#options.onPass('failed');
          if (!this.#failing) this.#options.log.warn({ err: error }, 'usage: exporting the closed hours failed; trying again every second');
          this.#failing = true;
        },
      )
      .finally(() => (this.#running = undefined));
  }

  async #pass(): Promise<PassOutcome> {
    const { delayMs, now: clock, exported, log } = this.#options;
    const now = clock();
    const before = new Date(Math.floor((now - delayMs) / HOUR_MS) * HOUR_MS);
    // Once the start is known, an idle look is one read, not a transaction of four round trips.
    if (this.#since && !(await usageExports.anyUnmarked(this.#since, before, this.#db))) return 'idle';
    const pass = await this.#db.transaction(async (tx) => {
      if (!(await usageExports.tryLock(tx))) return { outcome: 'locked' as const, since: this.#since };
      const since = this.#since ?? (await usageExports.start(before, tx));
      const hours = await usageExports.exportMarked(since, before, EXPORT_BATCH, tx);
      if (hours.length > 0) {
        await exported(tx, hours);
        log.info({ events: hours.length }, 'usage: closed hours exported');
      }
      return { outcome: hours.length > 0 ? ('sent' as const) : ('idle' as const), since };
    });
    this.#since = pass.since;
    return pass.outcome;
  }
}
