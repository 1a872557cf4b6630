import fp from 'fastify-plugin';
import { Counter, Gauge } from 'prom-client';
import type { WebhookSettings } from './settings.js';
import type { RefilledBalance } from '../credits/repository.js';
import type { Database, Transaction } from '../platform/db/database.js';
import type { RecordExportedHours } from '../usage/exporter.js';
import { creditsExhausted, creditsLow, creditsRefilled, keyBanned, usageHourly, usageThreshold, type RecordedEvent } from './events.js';
import { createWebhookDeliveriesRepository, DUE_CHANNEL } from './repository.js';
import { FIRST_RETRY_MS, WebhookSender } from './sender.js';

/**
 * Usage events by webhook (WEBHOOK_URL): the rate limiter's crossings of WEBHOOK_USAGE_THRESHOLDS,
 * its bans and the balances of credits that ran low (CREDITS_LOW_THRESHOLDS) or out, recorded in
 * the outbox (webhook_deliveries) by the instance whose decision made them, once per quota, window
 * and threshold (or balance, version and threshold) across all instances, and delivered by every
 * instance's sender from there, so a restart loses none.
 */
/** The `credits.refilled` events of a refill pass, recorded in its transaction (the credits plugin's `refilled`). */
export function recordRefills(db: Database) {
  const deliveries = createWebhookDeliveriesRepository(db);
  return async (tx: Transaction, refilled: RefilledBalance[], now: number) => {
    for (const { id, owner, version, remaining, refillAt } of refilled) {
      await deliveries.record(creditsRefilled({ balanceId: id, owner, version, remaining, refillAt }, now), tx);
    }
  };
}

/** The `usage.hourly` events of the hours an export sent (src/usage/exporter.ts), recorded in its transaction, of `source`. */
export function recordUsageHours(db: Database, source: string): RecordExportedHours {
  const deliveries = createWebhookDeliveriesRepository(db);
  return (tx, hours, sendId) =>
    deliveries.recordAll(
      hours.map((hour) => usageHourly(hour, source, sendId)),
      tx,
    );
}

/** The settings, WEBHOOK_RETENTION_DAYS, and the first retry's wait: FIRST_RETRY_MS unless a test shortens it. */
export type WebhooksOptions = WebhookSettings & { retentionDays: number; firstRetryMs?: number | undefined };

export default fp<WebhooksOptions>(
  async function webhooks(app, settings) {
    const deliveries = createWebhookDeliveriesRepository(app.db);
    const outcomes = new Counter({
      name: 'webhook_deliveries_total',
      help: 'Attempts to deliver usage events by outcome: delivered (2xx), retried (failed, tried again later), failed (failed for 24 hours; left failed)',
      labelNames: ['type', 'outcome'] as const,
      registers: [app.metricsRegistry],
    });
    new Gauge({
      name: 'webhook_deliveries_pending',
      help: 'Usage events recorded and not delivered yet (nor given up on); the last count read while the database does not answer',
      registers: [app.metricsRegistry],
      async collect() {
        // A failed count must not fail the whole scrape, when the other metrics matter most.
        try {
          this.set(await deliveries.countPending());
        } catch (error) {
          app.log.warn({ err: error }, 'webhooks: counting the pending deliveries failed');
        }
      },
    });
    const sender = new WebhookSender(deliveries, {
      ...settings,
      firstRetryMs: settings.firstRetryMs ?? FIRST_RETRY_MS,
      now: app.now,
      log: app.log,
      onOutcome: (type, outcome) => outcomes.inc({ type, outcome }),
    });

    /** Records the event; a failure is logged, and rejected for a caller that tries again (creditsLow). */
    const recording = (recorded: RecordedEvent) =>
      deliveries.record(recorded).catch((error: unknown) => {
        app.log.warn({ err: error, type: recorded.event.type }, 'webhooks: recording an event failed');
        throw error;
      });
    const record = (recorded: RecordedEvent) => void recording(recorded).catch(() => {});
    app.rateLimit.watchUsage({
      thresholds: settings.usageThresholds,
      crossed: (crossing) => record(usageThreshold(crossing, app.now())),
      banned: (ban) => record(keyBanned(ban, app.now())),
      creditsExhausted: (exhausted) => record(creditsExhausted(exhausted, app.now())),
      // Told once per balance, version and threshold by each instance: the outbox's dedupe key makes it once in all.
      creditsLowThresholds: settings.creditsLowThresholds,
      creditsLow: (low) => recording(creditsLow(low, app.now())),
    });

    // Any instance's new event, or an operator's retry, wakes every sender; the first to claim it sends it.
    const stopListening = await app.db.listen(
      DUE_CHANNEL,
      () => sender.wake(),
      () => sender.wake(),
    );
    sender.start();
    app.addHook('onClose', async () => {
      await stopListening();
      await sender.stop();
    });
  },
  { name: 'webhooks', dependencies: ['database', 'metrics', 'rate-limit'] },
);
