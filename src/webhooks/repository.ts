import type { Database, Queryable } from '../platform/db/database.js';
import type { EventType, RecordedEvent } from './events.js';

/** Heard by every instance's sender when a delivery is due now: recorded, or put back by an operator. */
export const DUE_CHANNEL = 'webhook_deliveries_due';

/**
 * How long a claim keeps other senders off a delivery: past an attempt's 10 s timeout, so that it
 * lapses only when its sender died mid-attempt.
 */
const CLAIM_SECONDS = 30;

export const DELIVERY_STATES = ['pending', 'delivered', 'failed'] as const;
export type DeliveryState = (typeof DELIVERY_STATES)[number];

/** A delivery as the admin API shows it. */
export interface WebhookDelivery {
  id: number;
  eventId: string;
  type: EventType;
  state: DeliveryState;
  attempts: number;
  createdAt: string;
  nextAttemptAt: string | null;
  lastAttemptAt: string | null;
  lastStatus: number | null;
  lastError: string | null;
  deliveredAt: string | null;
  /** The event's data, as in the body POSTed. */
  data: Record<string, unknown>;
}

/** A delivery a sender claimed: it alone attempts it until the claim lapses. */
export interface ClaimedDelivery {
  id: number;
  eventId: string;
  type: EventType;
  body: string;
  attempts: number;
}

interface DeliveryRow {
  id: number;
  event_id: string;
  type: EventType;
  state: DeliveryState;
  attempts: number;
  body: string;
  created_at: Date;
  next_attempt_at: Date;
  last_attempt_at: Date | null;
  last_status: number | null;
  last_error: string | null;
  delivered_at: Date | null;
}

const iso = (value: Date | null) => value && new Date(value).toISOString();
const COLUMNS =
  'id, event_id, type, state, attempts, body, created_at, next_attempt_at, last_attempt_at, last_status, last_error, delivered_at';

const deliveryOf = (row: DeliveryRow): WebhookDelivery => ({
  id: row.id,
  eventId: row.event_id,
  type: row.type,
  state: row.state,
  attempts: row.attempts,
  createdAt: iso(row.created_at)!,
  nextAttemptAt: row.state === 'pending' ? iso(row.next_attempt_at) : null,
  lastAttemptAt: iso(row.last_attempt_at),
  lastStatus: row.last_status,
  lastError: row.last_error,
  deliveredAt: iso(row.delivered_at),
  data: (JSON.parse(row.body) as RecordedEvent['event']).data,
});

const statements = {
  // Once per dedupe key across all instances; the senders hear of it at once.
  record: {
    name: 'webhook_deliveries_record',
    text: `WITH recorded AS (
             INSERT INTO webhook_deliveries (event_id, type, dedupe_key, body) VALUES ($1, $2, $3, $4)
             ON CONFLICT (dedupe_key) DO NOTHING RETURNING id)
           SELECT pg_notify('${DUE_CHANNEL}', '') FROM recorded`,
  },
  // Many events in one statement (an export's), each once per dedupe key; the senders hear of them at once.
  recordAll: {
    name: 'webhook_deliveries_record_all',
    text: `WITH recorded AS (
             INSERT INTO webhook_deliveries (event_id, type, dedupe_key, body)
             SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[])
             ON CONFLICT (dedupe_key) DO NOTHING RETURNING id)
           SELECT pg_notify('${DUE_CHANNEL}', '') FROM (SELECT count(*) AS count FROM recorded) AS batch WHERE count > 0`,
  },
  // Due deliveries, each claimed by one sender: skipped by the others while it holds the row, and
  // not due again until the claim lapses (an attempt's timeout and then some), should it stop.
  claim: {
    name: 'webhook_deliveries_claim',
    text: `UPDATE webhook_deliveries AS delivery
           SET attempts = attempts + 1, last_attempt_at = now(), next_attempt_at = now() + interval '${CLAIM_SECONDS} seconds'
           FROM (SELECT id FROM webhook_deliveries WHERE state = 'pending' AND next_attempt_at <= now()
                 ORDER BY next_attempt_at, id LIMIT $1 FOR UPDATE SKIP LOCKED) AS due
           WHERE delivery.id = due.id
           RETURNING delivery.id, delivery.event_id AS "eventId", delivery.type, delivery.body, delivery.attempts`,
  },
  delivered: {
    name: 'webhook_deliveries_delivered',
    text: `UPDATE webhook_deliveries SET state = 'delivered', delivered_at = now(), last_status = $2, last_error = NULL WHERE id = $1`,
  },
  // Tried again after the wait given, unless that is past its retry_until: then left failed.
  attemptFailed: {
    name: 'webhook_deliveries_attempt_failed',
    text: `UPDATE webhook_deliveries
           SET last_status = $2, last_error = $3, next_attempt_at = now() + make_interval(secs => $4::float8),
               state = CASE WHEN now() + make_interval(secs => $4::float8) > retry_until THEN 'failed' ELSE 'pending' END
           WHERE id = $1 RETURNING state`,
  },
  // An attempt cut short by its sender stopping: due again at once, for another instance or the next start.
  release: {
    name: 'webhook_deliveries_release',
    text: `UPDATE webhook_deliveries SET next_attempt_at = now() WHERE id = $1 AND state = 'pending'`,
  },
  get: { name: 'webhook_deliveries_get', text: `SELECT ${COLUMNS} FROM webhook_deliveries WHERE id = $1` },
  // Due now, unless an attempt holds its claim (the claim set next_attempt_at to exactly that far past
  // last_attempt_at; an outcome moves it): that attempt's outcome then decides, so still one at a time.
  retry: {
    name: 'webhook_deliveries_retry',
    text: `WITH retried AS (
             UPDATE webhook_deliveries
             SET state = 'pending', retry_until = now() + interval '24 hours',
                 next_attempt_at = CASE WHEN state = 'pending' AND next_attempt_at > now()
                                         AND next_attempt_at = last_attempt_at + interval '${CLAIM_SECONDS} seconds'
                                        THEN next_attempt_at ELSE now() END
             WHERE id = $1 AND state <> 'delivered' RETURNING ${COLUMNS})
           SELECT retried.*, pg_notify('${DUE_CHANNEL}', '') FROM retried`,
  },
  // The oldest delivered and failed deliveries recorded before $1 (by the app's clock; created_at is the database's,
  // the same time in production), at most $2. Rows another instance is deleting (or an operator retrying) are skipped,
  // not waited for, and a row a retry made pending meanwhile is left (FOR UPDATE checks the state again).
  prune: {
    name: 'webhook_deliveries_prune',
    text: `WITH pruned AS (
             DELETE FROM webhook_deliveries WHERE id IN (
               SELECT id FROM webhook_deliveries WHERE state <> 'pending' AND created_at < $1
               ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED)
             RETURNING 1)
           SELECT count(*)::int AS count FROM pruned`,
  },
  pending: { name: 'webhook_deliveries_pending', text: `SELECT count(*)::int AS count FROM webhook_deliveries WHERE state = 'pending'` },
} as const;

/** A page of deliveries, newest first, before an id; one statement with the state filter and one without. */
const pageStatement = (filtered: boolean) => ({
  name: `webhook_deliveries_page_${filtered ? 'state' : 'all'}`,
  text: `SELECT ${COLUMNS} FROM webhook_deliveries WHERE id < $1 ${filtered ? 'AND state = $3' : ''} ORDER BY id DESC LIMIT $2`,
});

/** The outbox of usage events: what senders deliver from and the admin API reads. */
export function createWebhookDeliveriesRepository(db: Database) {
  return {
    /**
     * Records an event unless its dedupe key was recorded already (by any instance); true when this call recorded it.
     * In the transaction given, an event commits with the change it tells of (a refill).
     */
    async record({ event, dedupeKey }: RecordedEvent, target: Queryable = db): Promise<boolean> {
      return (await target.query(statements.record, [event.id, event.type, dedupeKey, JSON.stringify(event)])).length > 0;
    },

    /** Records the events whose dedupe keys were not recorded before, in one statement, in the transaction given. */
    async recordAll(recorded: readonly RecordedEvent[], target: Queryable): Promise<void> {
      const columns: string[][] = [[], [], [], []];
      for (const { event, dedupeKey } of recorded) {
        [event.id, event.type, dedupeKey, JSON.stringify(event)].forEach((value, i) => columns[i]!.push(value));
      }
      await target.query(statements.recordAll, columns);
    },

    /** Claims up to `limit` due deliveries for CLAIM_SECONDS, counting the attempt. */
    async claimDue(limit: number): Promise<ClaimedDelivery[]> {
      return db.query<ClaimedDelivery>(statements.claim, [limit]);
    },

    async delivered(id: number, status: number): Promise<void> {
      await db.query(statements.delivered, [id, status]);
    },

    /** Records a failed attempt, to be tried again in `retryInSeconds` unless that is past its retry window; the state it is left in. */
    async attemptFailed(id: number, failure: { status: number | null; error: string }, retryInSeconds: number): Promise<DeliveryState> {
      const [row] = await db.query<{ state: DeliveryState }>(statements.attemptFailed, [id, failure.status, failure.error, retryInSeconds]);
      return row!.state;
    },

    /** Gives up a claim without an outcome (the sender is stopping): the delivery is due again now. */
    async release(id: number): Promise<void> {
      await db.query(statements.release, [id]);
    },

    async get(id: number): Promise<WebhookDelivery | undefined> {
      const [row] = await db.query<DeliveryRow>(statements.get, [id]);
      return row && deliveryOf(row);
    },

    /**
     * Puts a failed or pending delivery back: pending, due now (after the attempt in flight, if one is)
     * and retried for 24 hours more; undefined when it was delivered (or is not there).
     */
    async retry(id: number): Promise<WebhookDelivery | undefined> {
      const [row] = await db.query<DeliveryRow>(statements.retry, [id]);
      return row && deliveryOf(row);
    },

    /** A page of deliveries, newest first, before `beforeId`; `nextBeforeId` when more follow. */
    async page({ state, beforeId, limit }: { state?: DeliveryState; beforeId: number; limit: number }) {
      const params: unknown[] = [beforeId, limit + 1];
      if (state) params.push(state);
      const rows = await db.query<DeliveryRow>(pageStatement(state !== undefined), params);
      const deliveries = rows.slice(0, limit).map(deliveryOf);
      return { deliveries, nextBeforeId: rows.length > limit ? deliveries.at(-1)!.id : undefined };
    },

    /** Deletes up to `limit` delivered and failed deliveries recorded before `recordedBefore`, oldest first; how many it deleted. */
    async prune(recordedBefore: Date, limit: number): Promise<number> {
      const [row] = await db.query<{ count: number }>(statements.prune, [recordedBefore, limit]);
      return row!.count;
    },

    async countPending(): Promise<number> {
      const [row] = await db.query<{ count: number }>(statements.pending);
      return row!.count;
    },
  };
}

export type WebhookDeliveriesRepository = ReturnType<typeof createWebhookDeliveriesRepository>;
