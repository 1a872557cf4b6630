import { Type } from '@sinclair/typebox';
import { DATE_TIME } from '../api-keys/expiry.js';
import { Cursor, Literals, Nullable, Timestamp } from '../platform/schemas/common.js';

/** The schema pieces both reads of the usage record share: the admin API's (admin-schemas.ts) and a key's own (GET /v1/usage). */

/** A bound of the range: a whole hour (UTC), or a whole UTC day with granularity=day; the route checks that and the calendar. */
export const Bound = (description: string) =>
  Type.String({
    pattern: DATE_TIME.source,
    description,
    'x-error-message': 'must be an ISO 8601 date-time with a time zone, such as 2026-11-01T00:00:00Z',
  });

/** Rows in a JSON page when the caller does not say, and at most: a page is formatted at once, so it stays small. */
export const DEFAULT_USAGE_PAGE = 1_000;
const MAX_USAGE_PAGE = 5_000;

/** The buckets and the range of a read, checked further by range.ts. */
export const UsageRange = {
  granularity: Type.Optional(Literals(['hour', 'day'], 'The buckets: hours, or UTC days (hour when absent)')),
  start: Bound('The first bucket’s start, inclusive: a whole hour (UTC), a whole UTC day with granularity=day'),
  end: Bound('The end of the range, exclusive, after start, as whole as start'),
};

/** A JSON page of rows: its size (`limitNote` adds what the read's own format changes) and the cursor of a rel="next" link. */
export const UsagePage = (limitNote = '') => ({
  limit: Type.Optional(
    Type.Integer({
      minimum: 1,
      maximum: MAX_USAGE_PAGE,
      description: `Rows per JSON page: ${DEFAULT_USAGE_PAGE.toLocaleString('en')} when absent${limitNote}`,
      'x-error-message': `must be an integer from 1 to ${MAX_USAGE_PAGE}`,
    }),
  ),
  cursor: Cursor,
});

const Count = (description: string) => Type.Integer({ minimum: 0, format: 'int64', description });

export const UsageRow = Type.Object(
  {
    start: { ...Timestamp, description: 'The bucket’s start: an hour, or 00:00 UTC of a day' },
    keyId: Type.Optional(Type.Integer({ format: 'int64', description: 'With groupBy=key: the key the row counts' })),
    operation: Type.Optional(
      Nullable(
        Type.String({
          description:
            'With groupBy=operation: the operationId the row counts; null for requests that matched no operation (an unknown path)',
        }),
      ),
    ),
    requests: Count('Requests admitted and served, whatever their status (a shadow-mode would-be refusal is served)'),
    units: Count(
      "Units they spent: each its operation's cost (RATE_LIMIT_COSTS); none for a free revalidation (304) or an operation of cost 0",
    ),
    refused: Type.Object(
      {
        rateLimited: Count('429 rate_limited, and cost_exceeds_limit: over a minute or day window'),
        concurrency: Count('429 concurrency_limited: too many requests in flight'),
        credits: Count('429 credits_exhausted: fewer credits left than the operation costs'),
        banned: Count('429 api_key_banned: refused while the key was banned'),
      },
      { description: 'Requests the rate limiter refused, by kind; none of them spent units' },
    ),
  },
  { title: 'UsageRow', description: "A bucket's usage: one key's, or all of a customer's keys', or one key's or operation's with groupBy" },
);

export const UsageRows = Type.Array(UsageRow, {
  title: 'UsageRows',
  description: 'The buckets with usage, in order of start (then keyId or operation); a bucket without usage has no row',
});

/** A key's own rows (GET /v1/usage): the admin API's, but never per key, as no other key's usage is shown. */
const OwnUsageRow = Type.Omit(UsageRow, ['keyId'], {
  title: 'UsageRow',
  description: "A bucket's usage: the key's, or all of its customer's keys' with scope=customer; one operation's with groupBy=operation",
});

export const OwnUsageRows = Type.Array(OwnUsageRow, {
  title: 'UsageRows',
  description: 'The buckets with usage, in order of start (then operation); a bucket without usage has no row',
});
