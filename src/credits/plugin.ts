import fp from 'fastify-plugin';
import { creditsRefilled } from '../webhooks/events.js';
import { createWebhookDeliveriesRepository } from '../webhooks/repository.js';
import type { Transaction } from '../platform/db/database.js';
import { createCreditsRepository, type RefilledBalance } from './repository.js';

/** How often each instance looks for balances due a refill: a refill lands within about this long of its 00:00 UTC. */
export const REFILL_EVERY_MS = 1_000;

/** Balances refilled per transaction; more due are refilled by the next ones at once. */
const REFILL_BATCH = 500;

export interface CreditsOptions {
  /** Whether usage events are recorded (WEBHOOK_URL is set): then each refill records `credits.refilled`. */
  events: boolean;
}

/**
 * The refills of credit balances: every instance looks about once a second (by the app's clock)
 * for balances due, and refills each one once across all instances (refillDue), recording the
 * `credits.refilled` event in the same transaction, so that a refill and its event commit together.
 */
export default fp<CreditsOptions>(
  async function credits(app, { events }) {
    const balances = createCreditsRepository(app.db);
    const deliveries = events ? createWebhookDeliveriesRepository(app.db) : undefined;
    let running: Promise<void> | undefined;
    // Told once per run of failures (a database outage), not once a second.
    let failing = false;

    /** The events of the balances a pass refilled, recorded in the refills' transaction. */
    const recordEvents =
      (now: number) =>
      async (tx: Transaction, refilled: RefilledBalance[]): Promise<void> => {
        if (!deliveries) return;
        for (const { id, owner, version, remaining, refillAt } of refilled) {
          await deliveries.record(creditsRefilled({ balanceId: id, owner, version, remaining, refillAt }, now), tx);
        }
      };
    const refill = async () => {
      const now = app.now();
      // A full batch may leave more due: on until one is not full.
      let count: number;
      do count = await balances.refillDue(now, REFILL_BATCH, recordEvents(now));
      while (count === REFILL_BATCH);
    };
    const tick = () => {
      // One pass at a time: a slow database makes the next tick wait, not pile up.
      running ??= refill()
        .then(
          () => {
            if (failing) app.log.info('credits: refilling the balances due works again');
            failing = false;
          },
          (error: unknown) => {
            if (!failing) app.log.warn({ err: error }, 'credits: refilling the balances due failed; trying again every second');
            failing = true;
          },
        )
        .finally(() => (running = undefined));
    };
    const timer = setInterval(tick, REFILL_EVERY_MS).unref();
    app.addHook('onClose', async () => {
      clearInterval(timer);
      await running;
    });
  },
  { name: 'credits', dependencies: ['database'] },
);
