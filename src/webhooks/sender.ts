import { pruneInBatches } from '../platform/lib/prune-in-batches.js';
import type { FastifyBaseLogger } from 'fastify';
import type { ClaimedDelivery, WebhookDeliveriesRepository } from './repository.js';
import { contentTypeOf } from './events.js';
import { EVENT_ID_HEADER, SIGNATURE_HEADER, signature } from './signature.js';
import { DAY_MS, HOUR_MS, MINUTE_MS } from '../platform/time.js';

/** One attempt's bound: the receiver answers within it, or the attempt failed. */
const ATTEMPT_TIMEOUT_MS = 10_000;
/** Deliveries one sender attempts at once. */
const BATCH = 10;
/** How often a sender looks for deliveries that came due (a retry's wait passed); new ones wake it at once. */
const POLL_MS = 1_000;
/** The wait after the first failed attempt; each next one doubles. */
export const FIRST_RETRY_MS = 5_000;
/** The longest wait between two attempts. */
const MAX_RETRY_MS = HOUR_MS;
/** How often, by the app's clock, a sender deletes the settled deliveries past their retention. */
const PRUNE_EVERY_MS = MINUTE_MS;
/** Deliveries one statement deletes at most, so that no prune holds many rows (or the database) for long. */
const PRUNE_BATCH = 500;

export interface SenderOptions {
  url: string;
  /** Sent as the Authorization header: the receiver's own guard (WEBHOOK_URL's user and password). */
  authorization: string | undefined;
  secret: string;
  /** The wait after the first failed attempt (FIRST_RETRY_MS; tests shorten it); each next one doubles, up to an hour. */
  firstRetryMs: number;
  /** Days a delivered or failed delivery is kept after it was recorded. */
  retentionDays: number;
  /** The app's clock, which the retention is counted on (tests move it). */
  now: () => number;
  log: FastifyBaseLogger;
  /** Each attempt's outcome: delivered, retried (tried again later) or failed (given up). */
  onOutcome: (type: string, outcome: 'delivered' | 'retried' | 'failed') => void;
}

/** An attempt's outcome: the receiver's 2xx, or what a failed attempt leaves on the delivery (never the secret or the body). */
type Outcome = { delivered: true; status: number } | { delivered: false; status: number | null; error: string };

/**
 * Delivers the outbox: claims due deliveries (each by one sender across all instances), POSTs
 * each signed, and records the outcome: 2xx delivered; anything else tried again after an
 * exponential wait with jitter, until the delivery's 24 hours are over. Once a minute it deletes the
 * delivered and failed deliveries past their retention.
 */
export class WebhookSender {
  readonly #deliveries: WebhookDeliveriesRepository;
  readonly #options: SenderOptions;
  readonly #stopping = new AbortController();
  #poll: NodeJS.Timeout | undefined;
  #draining: Promise<void> | undefined;
  #again = false;
  #pruning: Promise<void> | undefined;
  #nextPruneAt = 0;

  constructor(deliveries: WebhookDeliveriesRepository, options: SenderOptions) {
    this.#deliveries = deliveries;
    this.#options = options;
  }

  start() {
    this.#poll = setInterval(() => this.wake(), POLL_MS).unref();
    this.wake();
  }

  /**
   * Looks for due deliveries now (one look at a time; a wake during one makes another follow it), and
   * for deliveries past their retention when a minute has passed since the last look.
   */
  wake() {
    if (this.#stopping.signal.aborted) return;
    this.#pruneWhenDue();
    if (this.#draining) {
      this.#again = true;
      return;
    }
    this.#draining = this.#drain()
      .catch((error: unknown) => this.#options.log.warn({ err: error }, 'webhooks: reading the deliveries failed'))
      .finally(() => (this.#draining = undefined));
  }

  /**
   * Stops looking, aborts the attempts in flight and waits for them: each is due again at once, for
   * another instance or the next start (a receiver that got it anyway drops it by its id).
   */
  async stop() {
    clearInterval(this.#poll);
    this.#stopping.abort();
    await Promise.all([this.#draining, this.#pruning]);
  }

  /**
   * Deletes the settled deliveries past their retention, once per PRUNE_EVERY_MS of the app's clock, beside
   * the deliveries' drain, so that a long prune (the first after an upgrade) holds up no delivery.
   */
  #pruneWhenDue() {
    const now = this.#options.now();
    if (this.#pruning || now < this.#nextPruneAt) return;
    this.#nextPruneAt = now + PRUNE_EVERY_MS;
    const { log, retentionDays } = this.#options;
    const before = new Date(now - retentionDays * DAY_MS);
    this.#pruning = pruneInBatches(
      (batch) => this.#deliveries.prune(before, batch),
      PRUNE_BATCH,
      () => this.#stopping.signal.aborted,
    )
      .then(
        (pruned) => {
          if (pruned > 0) log.info({ pruned }, 'webhooks: deliveries past their retention deleted');
        },
        (error: unknown) =>
          log.warn({ err: error }, 'webhooks: deleting the deliveries past their retention failed; trying again in a minute'),
      )
      .finally(() => (this.#pruning = undefined));
  }

  async #drain() {
    do {
      this.#again = false;
      const due = await this.#deliveries.claimDue(BATCH);
      await Promise.all(due.map((delivery) => this.#attempt(delivery)));
      if (due.length === BATCH) this.#again = true;
    } while (this.#again && !this.#stopping.signal.aborted);
  }

  async #attempt(delivery: ClaimedDelivery) {
    const outcome = await this.#send(delivery);
    if (this.#stopping.signal.aborted) return this.#deliveries.release(delivery.id);
    if (outcome.delivered) {
      await this.#deliveries.delivered(delivery.id, outcome.status);
      this.#options.onOutcome(delivery.type, 'delivered');
      return;
    }
    const failure = { status: outcome.status, error: outcome.error };
    const waitMs = Math.min(MAX_RETRY_MS, this.#options.firstRetryMs * 2 ** (delivery.attempts - 1)) * (1 + Math.random() / 5);
    const state = await this.#deliveries.attemptFailed(delivery.id, failure, waitMs / 1000);
    this.#options.onOutcome(delivery.type, state === 'failed' ? 'failed' : 'retried');
    const log = { deliveryId: delivery.id, type: delivery.type, attempt: delivery.attempts, ...failure };
    if (state === 'failed') this.#options.log.error(log, 'webhooks: delivery failed for 24 hours; left failed');
    else this.#options.log.warn({ ...log, retryInMs: Math.round(waitMs) }, 'webhooks: delivery attempt failed');
  }

  /** One POST, and what came of it. */
  async #send({ eventId, type, body }: ClaimedDelivery): Promise<Outcome> {
    // The receiver's clock judges the time, so it is the real one.
    const signed = signature(this.#options.secret, body, Math.floor(Date.now() / 1000));
    try {
      const response = await fetch(this.#options.url, {
        method: 'POST',
        headers: {
          'content-type': contentTypeOf(type),
          'user-agent': 'pet-store-webhooks/1',
          [SIGNATURE_HEADER]: signed,
          [EVENT_ID_HEADER]: eventId,
          ...(this.#options.authorization && { authorization: this.#options.authorization }),
        },
        body,
        redirect: 'manual',
        signal: AbortSignal.any([AbortSignal.timeout(ATTEMPT_TIMEOUT_MS), this.#stopping.signal]),
      });
      await response.body?.cancel();
      if (response.status >= 200 && response.status < 300) return { delivered: true, status: response.status };
      return { delivered: false, status: response.status, error: `HTTP ${response.status}` };
    } catch (error) {
      const { name, message, cause } = error as Error;
      // fetch says only "fetch failed"; its cause says why (connect ECONNREFUSED 10.0.0.5:443, a TLS error, ...),
      // in its code alone when it is an AggregateError (each of a name's addresses refused).
      const why = (cause instanceof Error && (cause.message || (cause as NodeJS.ErrnoException).code)) || message;
      return {
        delivered: false,
        status: null,
        error: name === 'TimeoutError' ? `no answer within ${ATTEMPT_TIMEOUT_MS / 1000} s` : `no answer: ${why}`,
      };
    }
  }
}
