import type { Database } from '../platform/db/database.js';
import { DAY_MS, HOUR_MS } from '../platform/time.js';

/** The kinds of refusal the usage record counts, as the admin API names them. */
export type RefusalKind = 'rateLimited' | 'concurrency' | 'credits' | 'banned';

/** What one hour of one key's requests of one operation did, or the sum of such hours. */
export interface UsageCounts {
  requests: number;
  units: number;
  refused: Record<RefusalKind, number>;
}

/** The counts of one hour, key and operation, as an instance adds them to the record. */
export interface UsageEntry extends UsageCounts {
  /** The hour's start, in ms since the epoch. */
  hour: number;
  keyId: number;
  customerId: number | null;
  /** The route's operationId; '' for a request that matched none. */
  operation: string;
}

/** A row of the admin API's answer: a bucket's sums, of one key or operation with groupBy. */
export interface UsageRow extends UsageCounts {
  start: string;
  keyId?: number;
  operation?: string | null;
}

export type Granularity = 'hour' | 'day';
export type UsageGroup = 'key' | 'operation';

/** Whose usage: a customer's (all its keys) or one key's. */
export type UsageOwner = { customerId: number } | { keyId: number };

export interface UsageQuery {
  owner: UsageOwner;
  granularity: Granularity;
  groupBy: UsageGroup | undefined;
  /** Inclusive. */
  start: Date;
  /** Exclusive. */
  end: Date;
}

export const COUNT_COLUMNS = [
  'requests',
  'units',
  'refused_rate_limited',
  'refused_concurrency',
  'refused_credits',
  'refused_banned',
] as const;

const statements = {
  // One statement per batch, whatever its size; rows in key order, so that two instances' batches (and the export's
  // marking) lock shared rows in the same order (no deadlock). Each batch holds an hour, key and operation once (ON
  // CONFLICT takes a row once). A row written is marked to be exported, again if it was (export-repository.ts).
  add: {
    name: 'usage_hours_add',
    text: `INSERT INTO usage_hours (hour, key_id, customer_id, operation, ${COUNT_COLUMNS.join(', ')})
           SELECT * FROM unnest($1::timestamptz[], $2::bigint[], $3::bigint[], $4::text[],
                                $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[])
             AS batch(hour, key_id, customer_id, operation, ${COUNT_COLUMNS.join(', ')})
           ORDER BY hour, key_id, operation
           ON CONFLICT (hour, key_id, operation) DO UPDATE SET
             ${COUNT_COLUMNS.map((column) => `${column} = usage_hours.${column} + EXCLUDED.${column}`).join(', ')},
             exported = false`,
  },
  // The oldest hours before $1 (by the app's clock), at most $2 rows, and as many of what the export sent of such hours;
  // the greater count, so that batches go on while either table had a full one. Rows another instance is deleting or
  // adding to are skipped, not waited for (the next prune takes them).
  prune: {
    name: 'usage_hours_prune',
    text: `WITH pruned AS (
             DELETE FROM usage_hours WHERE (hour, key_id, operation) IN (
               SELECT hour, key_id, operation FROM usage_hours WHERE hour < $1 ORDER BY hour LIMIT $2 FOR UPDATE SKIP LOCKED)
             RETURNING 1),
           sent AS (
             DELETE FROM usage_exports WHERE (hour, subject, operation) IN (
               SELECT hour, subject, operation FROM usage_exports WHERE hour < $1 ORDER BY hour LIMIT $2 FOR UPDATE SKIP LOCKED)
             RETURNING 1)
           SELECT greatest((SELECT count(*) FROM pruned), (SELECT count(*) FROM sent))::int AS count`,
  },
} as const;

/** UTC days, whatever the session's time zone. */
const BUCKETS: Record<Granularity, string> = { hour: 'hour', day: `date_bin('1 day', hour, TIMESTAMPTZ '2000-01-01 00:00:00+00')` };
const BUCKET_MS: Record<Granularity, number> = { hour: HOUR_MS, day: DAY_MS };
const GROUPS: Record<UsageGroup, { column: string; type: string }> = {
  key: { column: 'key_id', type: 'bigint' },
  operation: { column: 'operation', type: 'text' },
};

/**
 * The read of one shape of query: by owner, granularity and group, each a statement of its own. A
 * window of hours ($2 to $3), in order of bucket (then group), at most $4 rows; with a group, those
 * after the row ($5, $6) only, when given. Rows are summed in SQL, a bucket's rows together.
 */
function readStatement(owner: 'customer' | 'key', granularity: Granularity, groupBy: UsageGroup | undefined) {
  const group = groupBy && GROUPS[groupBy];
  const bucket = BUCKETS[granularity];
  return {
    name: `usage_hours_read_${owner}_${granularity}_${groupBy ?? 'all'}`,
    text: `SELECT ${bucket} AS start${group ? `, ${group.column}` : ''},
                  ${COUNT_COLUMNS.map((column) => `sum(${column})::bigint AS ${column}`).join(', ')}
           FROM usage_hours WHERE ${owner}_id = $1 AND hour >= $2 AND hour < $3
             ${group ? `AND ($5::timestamptz IS NULL OR (${bucket}, ${group.column}) > ($5, $6::${group.type}))` : ''}
           GROUP BY 1${group ? ', 2' : ''} ORDER BY 1${group ? ', 2' : ''} LIMIT $4`,
  };
}

/** Where a page of rows ended: the last row's bucket and group (its keyId or operation, '' for none). */
export interface UsagePosition {
  start: number;
  group: number | string | undefined;
}

/** The fewest buckets a page's read spans at once: a sparse range takes few reads, a dense one few rows past the page. */
const MIN_WINDOW_BUCKETS = 168;

type CountRow = Record<(typeof COUNT_COLUMNS)[number], number> & { start: Date; key_id?: number; operation?: string };

/** The counts of a row with the record's count columns (the record's, or what the export sent). */
export const countsOf = (row: Record<(typeof COUNT_COLUMNS)[number], number>): UsageCounts => ({
  requests: row.requests,
  units: row.units,
  refused: {
    rateLimited: row.refused_rate_limited,
    concurrency: row.refused_concurrency,
    credits: row.refused_credits,
    banned: row.refused_banned,
  },
});

const rowOf = (row: CountRow): UsageRow => ({
  start: new Date(row.start).toISOString(),
  ...(row.key_id !== undefined && { keyId: row.key_id }),
  ...(row.operation !== undefined && { operation: row.operation === '' ? null : row.operation }),
  ...countsOf(row),
});

/** The usage record: what the instances add, what the admin API reads, and its retention. */
export function createUsageRepository(db: Database) {
  return {
    /** Adds the entries' counts to the record, in one statement: all of them, or none when it fails. */
    async add(entries: UsageEntry[]): Promise<void> {
      const columns: unknown[][] = Array.from({ length: 10 }, () => []);
      for (const entry of entries) {
        const { refused } = entry;
        const values = [
          new Date(entry.hour).toISOString(),
          entry.keyId,
          entry.customerId,
          entry.operation,
          entry.requests,
          entry.units,
          refused.rateLimited,
          refused.concurrency,
          refused.credits,
          refused.banned,
        ];
        values.forEach((value, i) => columns[i]!.push(value));
      }
      await db.query(statements.add, columns);
    },

    /**
     * The sums of the query's buckets (and groups) that had usage, in order of start (then group),
     * after `after` when given: at most `limit` rows, or one more when more follow. Read in windows of
     * hours, so that no read sums the whole range to answer a page.
     */
    async page(
      { owner, granularity, groupBy, start, end }: UsageQuery,
      after: UsagePosition | undefined,
      limit: number,
    ): Promise<UsageRow[]> {
      const [kind, id] = 'customerId' in owner ? (['customer', owner.customerId] as const) : (['key', owner.keyId] as const);
      const statement = readStatement(kind, granularity, groupBy);
      const bucket = BUCKET_MS[granularity];
      const window = Math.max(limit + 1, MIN_WINDOW_BUCKETS) * bucket;
      // With a group, the rest of the last row's bucket; without, the bucket after it.
      let from = after === undefined ? start.getTime() : after.start + (groupBy ? 0 : bucket);
      let cursor = groupBy && after ? [new Date(after.start), after.group] : [null, null];
      const rows: UsageRow[] = [];
      while (rows.length <= limit && from < end.getTime()) {
        const to = Math.min(end.getTime(), from + window);
        const params = [id, new Date(from), new Date(to), limit + 1 - rows.length, ...(groupBy ? cursor : [])];
        for (const row of await db.query<CountRow>(statement, params)) rows.push(rowOf(row));
        from = to;
        cursor = [null, null];
      }
      return rows;
    },

    /** Deletes up to `limit` rows of hours before `before`, oldest first, and as many sent totals; the more it deleted of either. */
    async prune(before: Date, limit: number): Promise<number> {
      const [row] = await db.query<{ count: number }>(statements.prune, [before, limit]);
      return row!.count;
    },
  };
}

export type UsageRepository = ReturnType<typeof createUsageRepository>;
