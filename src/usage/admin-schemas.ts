import { Type, type Static } from '@sinclair/typebox';
import { Id, Literals, Nullable, Timestamp } from '../platform/schemas/common.js';
import { Bound, UsagePage, UsageRange } from './schemas.js';

export const UsageQuery = Type.Object({
  customerId: Type.Optional(Type.Integer({ ...Id, description: "The customer whose keys' usage is read, all of them together; or keyId" })),
  keyId: Type.Optional(Type.Integer({ ...Id, description: 'The key whose usage is read; or customerId' })),
  ...UsageRange,
  groupBy: Type.Optional(Literals(['key', 'operation'], 'A row per key or per operation in each bucket, instead of one for all')),
  ...UsagePage(' (not with CSV, which streams the whole range)'),
});
export type UsageQuery = Static<typeof UsageQuery>;
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
