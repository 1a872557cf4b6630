import type { Queryable } from '../platform/db/database.js';
import { COUNT_COLUMNS, countsOf, type UsageCounts } from './repository.js';

/**
 * One customer's (or key's without a customer) usage of one operation in one hour, as it is sent:
 * its totals and their revision (1, then one more each time a re-send's totals changed).
 */
export interface ExportedHour extends UsageCounts {
  /** The hour's start, in ms since the epoch. */
  hour: number;
  /** 'customer:<id>' or 'key:<id>': whose usage it sums. */
  subject: string;
  /** The route's operationId; '' for the requests that matched none. */
  operation: string;
  customerId: number | null;
  /** The customer's own id for it, as it is now. */
  externalId: string | null;
  /** The key's, for a key without a customer; null for a customer's. */
  keyId: number | null;
  revision: number;
}

/** Any number: it only keeps two exports (an instance's pass, a backfill) from deciding revisions at once. */
const EXPORT_LOCK = 7_310_058_001;

const SUMS = COUNT_COLUMNS.map((column) => `sum(usage.${column})::bigint AS ${column}`).join(', ');
const SUBJECT = `CASE WHEN usage.customer_id IS NULL THEN 'key:' || usage.key_id ELSE 'customer:' || usage.customer_id END`;

/**
 * Adds the totals (the last of `ctes`, named totals: hour, subject, operation, customer_id, key_id and the sums) to what
 * was sent: a new hour at revision 1, changed totals at the next revision, unchanged ones left as they are; the rows it
 * wrote, with the customer's externalId. The CTEs are the statement's own (a data-modifying one must be at its top).
 */
const upsertSent = (ctes: string) => `
  WITH ${ctes},
  written AS (
    INSERT INTO usage_exports AS sent (hour, subject, operation, customer_id, key_id, revision, ${COUNT_COLUMNS.join(', ')})
    SELECT hour, subject, operation, customer_id, key_id, 1, ${COUNT_COLUMNS.join(', ')} FROM totals
    ORDER BY hour, subject, operation
    ON CONFLICT (hour, subject, operation) DO UPDATE SET revision = sent.revision + 1,
      ${COUNT_COLUMNS.map((column) => `${column} = EXCLUDED.${column}`).join(', ')}
    WHERE (${COUNT_COLUMNS.map((column) => `sent.${column}`).join(', ')})
          IS DISTINCT FROM (${COUNT_COLUMNS.map((column) => `EXCLUDED.${column}`).join(', ')})
    RETURNING *)
  SELECT written.*, customers.external_id FROM written LEFT JOIN customers ON customers.id = written.customer_id`;

const statements = {
  lock: { name: 'usage_exports_lock', text: `SELECT pg_try_advisory_xact_lock(${EXPORT_LOCK}) AS locked` },
  waitForLock: { name: 'usage_exports_wait_for_lock', text: `SELECT pg_advisory_xact_lock(${EXPORT_LOCK})` },
  // The first exporting instance's start wins; the others read it.
  start: {
    name: 'usage_export_start',
    text: `WITH proposed AS (INSERT INTO usage_export_start (since) VALUES ($1) ON CONFLICT DO NOTHING RETURNING since)
           SELECT since FROM proposed UNION ALL SELECT since FROM usage_export_start`,
  },
  // Whether any row of the closed hours from $1 to $2 is not exported yet (the partial index answers it).
  anyUnmarked: {
    name: 'usage_exports_any_unmarked',
    text: 'SELECT EXISTS (SELECT 1 FROM usage_hours WHERE NOT exported AND hour >= $1 AND hour < $2) AS found',
  },
  // Up to $3 rows not exported of the closed hours from $1 to $2, marked (in the recorder's lock order): their customers'
  // (or keys') hours and operations.
  mark: {
    name: 'usage_exports_mark',
    text: `WITH marked AS (
             UPDATE usage_hours SET exported = true WHERE (hour, key_id, operation) IN (
               SELECT hour, key_id, operation FROM usage_hours WHERE NOT exported AND hour >= $1 AND hour < $2
               ORDER BY hour, key_id, operation LIMIT $3 FOR UPDATE)
             RETURNING hour, key_id, customer_id, operation)
           SELECT DISTINCT hour, operation, customer_id, CASE WHEN customer_id IS NULL THEN key_id END AS key_id FROM marked`,
  },
  // The totals of the groups marked ($1 to $4) over every row, exported or not: each group by the index that finds its
  // rows (a customer's, or the key's own).
  exportGroups: {
    name: 'usage_exports_groups',
    text: upsertSent(`
      groups AS (SELECT * FROM unnest($1::timestamptz[], $2::text[], $3::bigint[], $4::bigint[]) AS g(hour, operation, customer_id, key_id)),
      totals AS (
      SELECT groups.hour, ${SUBJECT} AS subject, groups.operation, groups.customer_id, NULL::bigint AS key_id, ${SUMS}
        FROM groups JOIN usage_hours AS usage
          ON usage.customer_id = groups.customer_id AND usage.hour = groups.hour AND usage.operation = groups.operation
        GROUP BY 1, 2, 3, 4
      UNION ALL
      SELECT groups.hour, ${SUBJECT}, groups.operation, NULL, groups.key_id, ${SUMS}
        FROM groups JOIN usage_hours AS usage
          ON usage.hour = groups.hour AND usage.key_id = groups.key_id AND usage.operation = groups.operation
             AND usage.customer_id IS NULL
        GROUP BY 1, 2, 3, 5)`),
  },
  // Every customer's (or $3's alone) and key's totals of the hours from $1 to $2.
  exportRange: {
    name: 'usage_exports_range',
    text: upsertSent(`
      totals AS (
      SELECT hour, ${SUBJECT} AS subject, operation, customer_id,
             CASE WHEN customer_id IS NULL THEN key_id END AS key_id, ${SUMS}
        FROM usage_hours AS usage WHERE hour >= $1 AND hour < $2 AND ($3::bigint IS NULL OR customer_id = $3)
        GROUP BY 1, 2, 3, 4, 5)`),
  },
  // What was sent of the hours from $1 to $2 (of customer $3 alone, when given), with the customer's externalId.
  sentInRange: {
    name: 'usage_exports_sent_in_range',
    text: `SELECT sent.*, customers.external_id FROM usage_exports AS sent LEFT JOIN customers ON customers.id = sent.customer_id
           WHERE sent.hour >= $1 AND sent.hour < $2 AND ($3::bigint IS NULL OR sent.customer_id = $3)
           ORDER BY sent.hour, sent.subject, sent.operation`,
  },
} as const;

type SentRow = Record<(typeof COUNT_COLUMNS)[number], number> & {
  hour: Date;
  subject: string;
  operation: string;
  customer_id: number | null;
  key_id: number | null;
  revision: number;
  external_id: string | null;
};

const hourOf = (row: SentRow): ExportedHour => ({
  hour: new Date(row.hour).getTime(),
  subject: row.subject,
  operation: row.operation,
  customerId: row.customer_id,
  externalId: row.external_id,
  keyId: row.key_id,
  revision: row.revision,
  ...countsOf(row),
});

/** What was sent of the usage record, in the transaction of the export that sends it (tx). */
export const usageExports = {
  /** Takes the export's lock for the transaction: false when another holds it (another instance's pass). */
  async tryLock(tx: Queryable): Promise<boolean> {
    const [row] = await tx.query<{ locked: boolean }>(statements.lock);
    return row!.locked;
  },

  /** Waits for the export's lock, for the transaction. */
  async lock(tx: Queryable): Promise<void> {
    await tx.query(statements.waitForLock);
  },

  /** The first hour the export sends by itself: `proposed`, unless an instance set it before. */
  async start(proposed: Date, tx: Queryable): Promise<Date> {
    const [row] = await tx.query<{ since: Date }>(statements.start, [proposed]);
    return new Date(row!.since);
  },

  /** Whether a row of the hours from `since` to `before` waits to be exported: a pass has anything to do. */
  async anyUnmarked(since: Date, before: Date, target: Queryable): Promise<boolean> {
    const [row] = await target.query<{ found: boolean }>(statements.anyUnmarked, [since, before]);
    return row!.found;
  },

  /**
   * Marks up to `limit` rows not exported of the hours from `since` to `before` exported, and sums their customers'
   * (or keys') hours: the hours whose totals are new or changed, each at its revision.
   */
  async exportMarked(since: Date, before: Date, limit: number, tx: Queryable): Promise<ExportedHour[]> {
    const groups = await tx.query<{ hour: Date; operation: string; customer_id: number | null; key_id: number | null }>(statements.mark, [
      since,
      before,
      limit,
    ]);
    if (groups.length === 0) return [];
    // Summed by a statement of its own: a write that committed while the marking waited for its row is in the row
    // marked, which only a later statement's snapshot sees.
    const columns = [
      groups.map((g) => new Date(g.hour).toISOString()),
      groups.map((g) => g.operation),
      groups.map((g) => g.customer_id),
      groups.map((g) => g.key_id),
    ];
    return (await tx.query<SentRow>(statements.exportGroups, columns)).map(hourOf);
  },

  /** Sums every hour from `start` to `end` (of one customer's keys when given) and returns all of them, each at its revision. */
  async exportRange(start: Date, end: Date, customerId: number | undefined, tx: Queryable): Promise<ExportedHour[]> {
    await tx.query(statements.exportRange, [start, end, customerId ?? null]);
    return (await tx.query<SentRow>(statements.sentInRange, [start, end, customerId ?? null])).map(hourOf);
  },
};
