import { errors } from '../platform/errors.js';
import { filterDigest } from '../platform/pagination.js';
import { DAY_MS, HOUR_MS } from '../platform/time.js';
import type { UsagePosition, UsageQuery, UsageRepository, UsageRow } from './repository.js';

/** A query as its cursor carries it: whose usage, the buckets, the groups and the range (a page's limit may change). */
const digestOf = ({ owner, granularity, groupBy, start, end }: UsageQuery) =>
  filterDigest([owner, granularity, groupBy ?? null, start.getTime(), end.getTime()]);

/** Where a row is in the order of the rows: its bucket, then its key or operation ('' for requests that matched none). */
export const positionOf = (row: UsageRow): UsagePosition => ({
  start: Date.parse(row.start),
  group: row.keyId ?? (row.operation === undefined ? undefined : (row.operation ?? '')),
});

/** The cursor of the page after `last`: its position and the query's digest, base64url-encoded so clients treat it as opaque. */
export function encodeUsageCursor(query: UsageQuery, last: UsageRow): string {
  const { start, group } = positionOf(last);
  return Buffer.from(`${digestOf(query)}:${start}:${group ?? ''}`).toString('base64url');
}

const CURSOR = /^([0-9A-Za-z_-]{12}):([0-9]{1,15}):(.*)$/s;

/**
 * The position to continue after; a cursor that is not ours is a 400, and so is one of another query
 * (its owner, granularity, range or groups changed between pages: `kept` names the parameters that say them).
 */
export function decodeUsageCursor(
  cursor: string,
  query: UsageQuery,
  kept = 'the customerId or keyId, granularity, start, end and groupBy',
): UsagePosition {
  const text = Buffer.from(cursor, 'base64url').toString('utf8');
  const match = CURSOR.exec(text);
  const notOurs = () => errors.badRequest('querystring/cursor is not a cursor from a rel="next" link');
  if (!match || Buffer.from(text).toString('base64url') !== cursor) throw notOurs();
  if (match[1] !== digestOf(query)) {
    throw errors.badRequest(`querystring/cursor was made for another query; keep ${kept} of the first page`);
  }
  const start = Number(match[2]);
  const group = match[3]!;
  const groupFits = query.groupBy === 'key' ? /^[1-9][0-9]{0,15}$/.test(group) : query.groupBy === 'operation' || group === '';
  // A bucket's start: read from another instant, a bucket would come back cut, or twice.
  const onBucket = (start - query.start.getTime()) % (query.granularity === 'day' ? DAY_MS : HOUR_MS) === 0;
  if (start < query.start.getTime() || start >= query.end.getTime() || !onBucket || !groupFits) throw notOurs();
  return { start, group: query.groupBy === 'key' ? Number(group) : query.groupBy === 'operation' ? group : undefined };
}

/** A JSON page: the query's rows after `after`, at most `limit`, and the cursor of the next page when more follow. */
export async function usagePage(usage: UsageRepository, query: UsageQuery, after: UsagePosition | undefined, limit: number) {
  const rows = await usage.page(query, after, limit);
  if (rows.length <= limit) return { rows, next: undefined };
  rows.length = limit;
  return { rows, next: encodeUsageCursor(query, rows.at(-1)!) };
}
