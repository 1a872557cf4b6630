import { Readable } from 'node:stream';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import Negotiator from 'negotiator';
import type { ApiKeysRepository } from '../api-keys/repository.js';
import { dateTimeOf } from '../api-keys/expiry.js';
import type { CustomersRepository } from '../customers/repository.js';
import { errors } from '../platform/errors.js';
import { refuseOtherMethods } from '../platform/http/method-not-allowed.js';
import { nextLink } from '../platform/pagination.js';
import { ErrorBody } from '../platform/schemas/error.js';
import type { ActorOf } from '../audit/repository.js';
import { DEFAULT_USAGE_PAGE, UsageExport, UsageExportRequest, UsageQuery, UsageRows } from './admin-schemas.js';
import { CSV_COUNTS, usageCsv } from './csv.js';
import { decodeUsageCursor, encodeUsageCursor } from './pages.js';
import type { Granularity, UsageOwner, UsageRepository } from './repository.js';
import type { createUsageExportRules } from './rules.js';
import { DAY_MS, HOUR_MS } from '../platform/time.js';

const USAGE_PATH = '/admin/v1/usage';
const EXPORTS_PATH = '/admin/v1/usage/exports';

/** The longest range a backfill sends at once. */
const MAX_EXPORT_DAYS = 31;

/** The longest range each granularity answers: a year of hours (8,784 buckets at most), ten years of days. */
const MAX_RANGE_DAYS: Record<Granularity, number> = { hour: 366, day: 3_660 };

export const CSV_TYPE = 'text/csv; charset=utf-8; header=present';

export interface AdminUsageOptions {
  usage: UsageRepository;
  keys: ApiKeysRepository;
  customers: CustomersRepository;
  /** The backfill of usage.hourly events; undefined when USAGE_EXPORT is off. */
  exports: ReturnType<typeof createUsageExportRules> | undefined;
  actorOf: ActorOf;
  /** The app's clock: which hour is the current one. */
  now: () => number;
}

/** A bound of the range, checked: on the calendar, and a whole bucket of the granularity; `field` named as its error names it. */
function boundOf(field: string, text: string, granularity: Granularity): Date {
  const date = dateTimeOf(text);
  if (!date) throw errors.badRequest(`${field} is no date and time on the calendar`);
  if (date.getTime() % (granularity === 'day' ? DAY_MS : HOUR_MS) !== 0) {
    throw errors.badRequest(
      `${field} must be ${granularity === 'day' ? '00:00 UTC of a day, with granularity=day' : 'a whole hour (UTC)'}, as the buckets are`,
    );
  }
  return date;
}

/** The query's range, checked: start before end, and no longer than its granularity answers. */
function rangeOf(query: UsageQuery, granularity: Granularity) {
  const start = boundOf('querystring/start', query.start, granularity);
  const end = boundOf('querystring/end', query.end, granularity);
  if (start >= end) throw errors.badRequest('querystring/start must be before end');
  const most = MAX_RANGE_DAYS[granularity];
  if (end.getTime() - start.getTime() > most * DAY_MS) {
    throw errors.badRequest(
      `querystring/end: the range from start to end is more than ${most} days, the most granularity=${granularity} answers` +
        (granularity === 'hour' ? '; ask granularity=day, or a shorter range' : '; ask a shorter range'),
    );
  }
  return { start, end };
}

/** Whose usage: exactly one of customerId and keyId. */
function ownerOf({ customerId, keyId }: UsageQuery): UsageOwner {
  if (customerId === undefined && keyId === undefined)
    throw errors.badRequest('querystring/customerId or keyId is required: exactly one of them');
  if (customerId !== undefined && keyId !== undefined)
    throw errors.badRequest('querystring/keyId goes without customerId: exactly one of them');
  return customerId !== undefined ? { customerId } : { keyId: keyId! };
}

/** A 400 naming the field, for an owner that is no customer or key (never one made later: ids are not reused). */
async function checkExists(owner: UsageOwner, { keys, customers }: AdminUsageOptions) {
  if ('customerId' in owner) {
    if (!(await customers.get(owner.customerId))) throw errors.badRequest(`querystring/customerId names no customer (${owner.customerId})`);
  } else if (!(await keys.get(owner.keyId))) throw errors.badRequest(`querystring/keyId names no key (${owner.keyId})`);
}

/**
 * CSV when Accept prefers it to JSON (by quality, then the most specific range, then the order
 * named, as negotiator reads RFC 9110); JSON otherwise: no Accept, any type, or neither offered.
 */
const wantsCsv = (accept: string | undefined) =>
  accept !== undefined && new Negotiator({ headers: { accept } }).mediaType(['application/json', CSV_TYPE]) === CSV_TYPE;

/**
 * The usage record of a customer or a key (docs/admin-api.md, "Usage"), hour by hour or day by day,
 * for billing and support: JSON, or CSV for a billing import.
 */
const adminUsage: FastifyPluginAsyncTypebox<AdminUsageOptions> = async (admin, options) => {
  admin.get(
    USAGE_PATH,
    {
      schema: {
        operationId: 'getUsage',
        tags: ['usage'],
        summary: "A customer's or a key's usage by hour or UTC day: requests served, units spent and refusals by kind",
        querystring: UsageQuery,
        response: {
          200: {
            description:
              'The buckets with usage, in order: JSON in pages (a rel="next" Link when more follow), or CSV (Accept: text/csv) of the whole range in one stream, with the same rows: a header line, the refused kinds as columns',
            headers: { link: { type: 'string', description: 'RFC 8288 rel="next" link (JSON only), when more rows follow' } },
            content: {
              'application/json': { schema: UsageRows },
              'text/csv': {
                schema: Type.String({
                  description: `start,[keyId|operation,]${CSV_COUNTS.join(',')}, then a line per row (CRLF)`,
                }),
              },
            },
          },
          400: ErrorBody,
        },
      },
    },
    async (request, reply) => {
      const { query } = request;
      const granularity = query.granularity ?? 'hour';
      const owner = ownerOf(query);
      const usageQuery = { owner, granularity, groupBy: query.groupBy, ...rangeOf(query, granularity) };
      const csv = wantsCsv(request.headers.accept);
      if (csv && (query.cursor !== undefined || query.limit !== undefined)) {
        throw errors.badRequest(
          `querystring/${query.cursor !== undefined ? 'cursor' : 'limit'} pages JSON; CSV is the whole range in one stream`,
        );
      }
      const after = query.cursor === undefined ? undefined : decodeUsageCursor(query.cursor, usageQuery);
      await checkExists(owner, options);
      if (csv) {
        // Streamed from the record page by page as the client reads it, never the whole range in memory: the schema's string, in parts.
        const stream = Readable.from(usageCsv(options.usage, usageQuery), { objectMode: false });
        return reply.type(CSV_TYPE).send(stream as unknown as string);
      }
      const limit = query.limit ?? DEFAULT_USAGE_PAGE;
      const rows = await options.usage.page(usageQuery, after, limit);
      if (rows.length > limit) {
        rows.length = limit;
        const { customerId, keyId, start, end, groupBy } = query;
        const cursor = encodeUsageCursor(usageQuery, rows.at(-1)!);
        reply.header(
          'link',
          nextLink(USAGE_PATH, { customerId, keyId, granularity: query.granularity, start, end, groupBy, limit: query.limit, cursor }),
        );
      }
      return rows;
    },
  );
  refuseOtherMethods(admin, USAGE_PATH, ['GET']);

  admin.post(
    EXPORTS_PATH,
    {
      schema: {
        operationId: 'exportUsage',
        tags: ['usage'],
        summary: 'Send hours of the usage record again as usage.hourly events (a backfill), each with its stable id',
        description:
          'Queues one event per customer (or key without a customer), operation and hour with usage in the range: at the revision ' +
          'sent last when its totals are unchanged, at the next when they changed. `end` may reach into the current hour: its ' +
          'totals so far are sent, and sent again at a higher revision once it closes. Needs USAGE_EXPORT=hourly.',
        body: UsageExportRequest,
        response: {
          202: UsageExport,
          400: ErrorBody,
          409: { ...ErrorBody, description: 'USAGE_EXPORT is off (`conflict`): no usage.hourly event is sent' },
        },
      },
      config: { writes: true, idempotent: true },
    },
    async (request, reply) => {
      const { exports, customers, actorOf } = options;
      if (!exports) throw errors.conflict('USAGE_EXPORT is off: set USAGE_EXPORT=hourly (with WEBHOOK_URL) to send usage.hourly events');
      const { body } = request;
      const start = boundOf('body/start', body.start, 'hour');
      const end = boundOf('body/end', body.end, 'hour');
      if (start >= end) throw errors.badRequest('body/start must be before end');
      if (end.getTime() - start.getTime() > MAX_EXPORT_DAYS * DAY_MS)
        throw errors.badRequest(`body/end: the range from start to end is more than ${MAX_EXPORT_DAYS} days; send it in parts`);
      if (end.getTime() > Math.ceil((options.now() + 1) / HOUR_MS) * HOUR_MS)
        throw errors.badRequest('body/end is past the end of the current hour: those hours have no usage yet');
      if (body.customerId !== undefined && !(await customers.get(body.customerId)))
        throw errors.badRequest(`body/customerId names no customer (${body.customerId})`);
      const { status, body: answer } = await admin.idempotently(request, reply, async (tx) => {
        const events = await exports.resend({ start, end, customerId: body.customerId }, { tx, actor: actorOf(request) });
        return { status: 202, body: { start: start.toISOString(), end: end.toISOString(), customerId: body.customerId ?? null, events } };
      });
      return reply.code(status).send(answer);
    },
  );
  refuseOtherMethods(admin, EXPORTS_PATH, ['POST']);
};

export default adminUsage;
