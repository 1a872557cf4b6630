import { Type, type Static } from '@sinclair/typebox';
import { DATE_TIME } from '../api-keys/expiry.js';
import { Cursor, Id, Literals, Nullable, Timestamp } from '../platform/schemas/common.js';

/** A bound of the range: a whole hour (UTC), or a whole UTC day with granularity=day; the route checks that and the calendar. */
const Bound = (description: string) =>
  Type.String({
    pattern: DATE_TIME.source,
    description,
    'x-error-message': 'must be an ISO 8601 date-time with a time zone, such as 2026-11-01T00:00:00Z',
  });

/** Rows in a JSON page when the caller does not say, and at most: a page is formatted at once, so it stays small. */
export const DEFAULT_USAGE_PAGE = 1_000;
const MAX_USAGE_PAGE = 5_000;

export const UsageQuery = Type.Object({
  customerId: Type.Optional(Type.Integer({ ...Id, description: "The customer whose keys' usage is read, all of them together; or keyId" })),
  keyId: Type.Optional(Type.Integer({ ...Id, description: 'The key whose usage is read; or customerId' })),
  granularity: Type.Optional(Literals(['hour', 'day'], 'The buckets: hours, or UTC days (hour when absent)')),
  start: Bound('The first bucket’s start, inclusive: a whole hour (UTC), a whole UTC day with granularity=day'),
  end: Bound('The end of the range, exclusive, after start, as whole as start'),
  groupBy: Type.Optional(Literals(['key', 'operation'], 'A row per key or per operation in each bucket, instead of one for all')),
  limit: Type.Optional(
    Type.Integer({
      minimum: 1,
      maximum: MAX_USAGE_PAGE,
      description: `Rows per JSON page: ${DEFAULT_USAGE_PAGE.toLocaleString('en')} when absent (not with CSV, which streams the whole range)`,
      'x-error-message': `must be an integer from 1 to ${MAX_USAGE_PAGE}`,
    }),
  ),
  cursor: Cursor,
});
export type UsageQuery = Static<typeof UsageQuery>;

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

/** Hours of the usage record to send again as usage.hourly events. */
export const UsageExportRequest = Type.Object(
  {
    start: Bound('The first hour sent: a whole hour (UTC)'),
    end: Bound('The end, exclusive: a whole hour (UTC) after start, at most 31 days on, and at most the end of the current hour'),
    customerId: Type.Optional(Type.Integer({ ...Id, description: "Only this customer's hours; every customer's and key's when absent" })),
  },
  { title: 'UsageExportRequest', additionalProperties: false, 'x-error-message': 'must be a JSON object with known fields only' },
);
export type UsageExportRequest = Static<typeof UsageExportRequest>;

export const UsageExport = Type.Object(
  {
    start: Timestamp,
    end: Timestamp,
    customerId: Nullable(Type.Integer({ format: 'int64' })),
    events: Type.Integer({
      minimum: 0,
      description:
        'usage.hourly events queued for WEBHOOK_URL: one per customer (or key without a customer), operation and hour with usage',
    }),
  },
  {
    title: 'UsageExport',
    description: 'A backfill queued: its events are delivered as every usage event is (GET /admin/v1/webhook-deliveries)',
  },
);
