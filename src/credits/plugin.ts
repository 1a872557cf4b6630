import fp from 'fastify-plugin';
import type { Transaction } from '../platform/db/database.js';
import { CreditLedger } from './ledger.js';
import { createLedgerRepository } from './ledger-repository.js';
import type { CreditsLedger, Ledger } from './ports.js';
import { createCreditsRepository, type RefilledBalance } from './repository.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** The record of credits as the limiter spends through it (src/rate-limit/plugin.ts). */
    creditsLedger: CreditsLedger;
  }
}

/** How often each instance looks for balances due a refill: a refill lands within about this long of its 00:00 UTC. */
export const REFILL_EVERY_MS = 1_000;

/** Balances refilled per transaction; more due are refilled by the next ones at once. */
const REFILL_BATCH = 500;

export interface CreditsOptions {
  /** Records what a refill pass refilled in its transaction (the `credits.refilled` events, with WEBHOOK_URL set). */
  refilled?: (tx: Transaction, refilled: RefilledBalance[], now: number) => Promise<void>;
}

/**
 * The record of credits on every instance: the ledger the limiter spends through (opened by it once
 * its store is chosen, closed with the app), and the refills: every instance looks about once a
 * second (by the app's clock) for balances due, and refills each one once across all instances
 * (refillDue), recording what `refilled` makes of it in the same transaction, so that a refill and
 * its event commit together.
 */
export default fp<CreditsOptions>(
  async function credits(app, { refilled }) {
    const ledgers = createLedgerRepository(app.db);
    app.decorate('creditsLedger', {
      records: ledgers,
      open(live) {
        const ledger = new CreditLedger(ledgers, app.log, live);
        // Added as the limiter opens it, after its store's: closed first, while the store still answers.
        app.addHook('onClose', () => ledger.close());
        return ledger satisfies Ledger;
      },
    } satisfies CreditsLedger);

    const balances = createCreditsRepository(app.db);
    let running: Promise<void> | undefined;
    // Told once per run of failures (a database outage), not once a second.
    let failing = false;
    const recordRefills = (now: number) => async (tx: Transaction, done: RefilledBalance[]) => {
      await refilled?.(tx, done, now);
    };
    const refill = async () => {
      const now = app.now();
      // A full batch may leave more due: on until one is not full.
      let count: number;
      do count = await balances.refillDue(now, REFILL_BATCH, recordRefills(now));
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
