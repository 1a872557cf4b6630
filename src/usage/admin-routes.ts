import { Readable } from 'node:stream';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import Negotiator from 'negotiator';
import type { ApiKeysRepository } from '../api-keys/repository.js';
import type { CustomersRepository } from '../customers/repository.js';
import { errors } from '../platform/errors.js';
import { refuseOtherMethods } from '../platform/http/method-not-allowed.js';
import { nextLink } from '../platform/pagination.js';
import { ErrorBody } from '../platform/schemas/error.js';
import { UsageQuery } from './admin-schemas.js';
import { rangeOf } from './range.js';
import { DEFAULT_USAGE_PAGE, UsageRows } from './schemas.js';
import { CSV_COUNTS, usageCsv } from './csv.js';
import { decodeUsageCursor, usagePage } from './pages.js';
import type { UsageOwner, UsageRepository } from './repository.js';

const USAGE_PATH = '/admin/v1/usage';

export const CSV_TYPE = 'text/csv; charset=utf-8; header=present';

export interface AdminUsageOptions {
  usage: UsageRepository;
  keys: ApiKeysRepository;
  customers: CustomersRepository;
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
      const { rows, next } = await usagePage(options.usage, usageQuery, after, limit);
      if (next) {
        const { customerId, keyId, start, end, groupBy } = query;
        reply.header(
          'link',
          nextLink(USAGE_PATH, {
            customerId,
            keyId,
            granularity: query.granularity,
            start,
            end,
            groupBy,
            limit: query.limit,
            cursor: next,
          }),
        );
      }
      return rows;
    },
  );
  refuseOtherMethods(admin, USAGE_PATH, ['GET']);
};

export default adminUsage;
