import fp from 'fastify-plugin';
import { Counter } from 'prom-client';
import type { FastifyRequest } from 'fastify';
import type { ApiKeyIdentity } from '../api-keys/identity.js';
import { UsageExporter, type RecordExportedHours } from './exporter.js';
import { UsageRecorder } from './recorder.js';
import { createUsageRepository, type RefusalKind } from './repository.js';

declare module 'fastify' {
  interface FastifyInstance {
    usage: UsageRecording;
  }
}

/** The decisions on a request with a valid key, as the /v1 pipeline tells them to the usage record. */
export interface UsageRecording {
  /** The limiter admitted the request, of the operation (its operationId; none for an unknown path) and its cost. */
  admitted(request: FastifyRequest, operation: string | undefined, cost: number): void;
  /**
   * Once answered: a request `admitted` counts as served, whatever its status, spending its operation's
   * cost, or nothing when `free` (a revalidation the limiter takes back), in the hour it was admitted. Any other (refused, or answered
   * before the limiter decided) counts nothing here.
   */
  served(request: FastifyRequest, key: ApiKeyIdentity, free: boolean): void;
  /** The limiter refused the request with `error`: counted by the kind of its code; an error of no such code is no refusal. */
  refused(key: ApiKeyIdentity, operation: string | undefined, error: unknown): void;
  /** Writes what this instance counted so far, after the write under way if there is one (tests, and the close). */
  flush(): Promise<void>;
}

/** The limiter's refusals, by their API code, as the record counts them. */
const REFUSAL_KINDS: Readonly<Record<string, RefusalKind>> = {
  rate_limited: 'rateLimited',
  cost_exceeds_limit: 'rateLimited',
  concurrency_limited: 'concurrency',
  credits_exhausted: 'credits',
  api_key_banned: 'banned',
};

/**
 * What a request the limiter admitted spends, and of which operation, until it is answered: request
 * decorations only this module names (cheaper than a WeakMap entry). NOT_ADMITTED: nothing to count.
 */
const COST = Symbol('usageCost');
const OPERATION = Symbol('usageOperation');
const ADMITTED_AT = Symbol('usageAdmittedAt');
const NOT_ADMITTED = -1;
type Marked = FastifyRequest & { [COST]: number; [OPERATION]: string | undefined; [ADMITTED_AT]: number };

export interface UsageOptions {
  /** Days the record keeps an hour (USAGE_RETENTION_DAYS). */
  retentionDays: number;
  /** With USAGE_EXPORT=hourly: how long after an hour closes it is sent, and what records its events. */
  export?: { delayMs: number; exported: RecordExportedHours } | undefined;
}

/**
 * The usage record (docs/admin-api.md, "The usage record"): every decision on a request with a valid key,
 * counted in memory per hour, key and operation, and added to usage_hours each second and at close
 * (recorder.ts); with `export`, each closed hour sent as events (exporter.ts). USAGE_RETENTION_DAYS 0
 * records nothing (and prunes every hour recorded before).
 */
export default fp<UsageOptions>(
  async function usage(app, { retentionDays, export: exporting }) {
    const recorder = new UsageRecorder(createUsageRepository(app.db), { retentionDays, now: app.now, log: app.log });
    recorder.start();
    // Closing hooks run once the listener has closed and its requests are answered: the last counts are in.
    app.addHook('onClose', () => recorder.stop());
    if (exporting) {
      const passes = new Counter({
        name: 'usage_export_passes_total',
        help: "This instance's looks for closed hours of the usage record to send (USAGE_EXPORT=hourly), by outcome: sent (usage.hourly events recorded), idle (nothing new), locked (another instance's pass was running), failed",
        labelNames: ['outcome'] as const,
        registers: [app.metricsRegistry],
      });
      const exporter = new UsageExporter(app.db, {
        ...exporting,
        now: app.now,
        log: app.log,
        onPass: (outcome) => passes.inc({ outcome }),
      });
      exporter.start();
      // What this instance writes at its close is sent by the next pass of any instance still running.
      app.addHook('onClose', () => exporter.stop());
    }
    // No record kept: nothing is counted, and the hours recorded before are pruned all the same.
    if (retentionDays === 0) {
      app.decorate('usage', { admitted() {}, served() {}, refused() {}, flush: () => recorder.flush() } satisfies UsageRecording);
      return;
    }
    app.decorateRequest(COST, NOT_ADMITTED);
    app.decorateRequest(OPERATION, undefined);
    app.decorateRequest(ADMITTED_AT, 0);
    app.decorate('usage', {
      admitted(request, operation, cost) {
        (request as Marked)[COST] = cost;
        (request as Marked)[OPERATION] = operation;
        // The hour of the decision, as its credits and a refusal's count: not of the answer, which may be in the next.
        (request as Marked)[ADMITTED_AT] = app.now();
      },
      served(request, key, free) {
        const cost = (request as Marked)[COST];
        if (cost === NOT_ADMITTED) return;
        (request as Marked)[COST] = NOT_ADMITTED;
        recorder.served(key, (request as Marked)[OPERATION], free ? 0 : cost, (request as Marked)[ADMITTED_AT]);
      },
      refused(key, operation, error) {
        const kind = REFUSAL_KINDS[(error as { code?: string } | null)?.code ?? ''];
        if (kind) recorder.refused(key, operation, kind);
      },
      flush: () => recorder.flush(),
    } satisfies UsageRecording);
  },
  { name: 'usage', dependencies: ['database', 'metrics'] },
);
