import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { ApiKeyIdentity } from '../api-keys/identity.js';
import { errors } from '../platform/errors.js';
import { refuseOtherMethods } from '../platform/http/method-not-allowed.js';
import { nextLink } from '../platform/pagination.js';
import { Literals } from '../platform/schemas/common.js';
import { ErrorBody } from '../platform/schemas/error.js';
import { FREE_CALL_COST, FREE_CALLS_PER_MINUTE, type FreeCall } from '../rate-limit/free-calls.js';
import { decodeUsageCursor, usagePage } from './pages.js';
import { rangeOf } from './range.js';
import type { UsageOwner, UsageRepository } from './repository.js';
import { DEFAULT_USAGE_PAGE, OwnUsageRows, UsagePage, UsageRange } from './schemas.js';

const GET_USAGE: FreeCall = { operationId: 'getUsage', route: 'GET /v1/usage' };

const OwnUsageQuery = Type.Object({
  ...UsageRange,
  scope: Type.Optional(
    Literals(
      ['key', 'customer'],
      "Whose usage: the calling key's own (key, when absent), or all of its customer's keys' together (customer; 400 for a key of no customer)",
    ),
  ),
  groupBy: Type.Optional(Literals(['operation'], 'A row per operation in each bucket, instead of one for all')),
  ...UsagePage(),
});

export interface UsageRoutesOptions {
  usage: UsageRepository;
}

/** Whose rows the key may read: its own, or its customer's; never another's, so the query names no key or customer. */
function ownerOf(key: ApiKeyIdentity, scope: 'key' | 'customer'): UsageOwner {
  if (scope === 'key') return { keyId: key.id };
  if (key.customerId === null) throw errors.badRequest('querystring/scope=customer: this API key belongs to no customer; ask scope=key');
  return { customerId: key.customerId };
}

/**
 * The caller's own usage record (docs/api.md, "Your usage"), as the admin API's GET /admin/v1/usage
 * reads it for its key or customer: GitHub's and OpenAI's usage pages, without an admin. A free
 * operation (rate-limit/free-calls.ts): it spends nothing of the key's windows or credits, and has
 * a limit of its own.
 */
const usageRoutes: FastifyPluginAsyncTypebox<UsageRoutesOptions> = async (app, { usage }) => {
  const base = app.config.PUBLIC_BASE_URL;
  app.get(
    '/usage',
    {
      schema: {
        operationId: GET_USAGE.operationId,
        tags: ['usage'],
        summary: "The key's own usage (or its customer's) by hour or UTC day: requests served, units spent and refusals by kind",
        description:
          "The usage record's rows of the calling key, or of all its customer's keys together with `scope=customer`, as the admin API's usage read has them; " +
          'no other key or customer can be named. Rows are written by each instance about once a second, so the last seconds may not show yet. ' +
          `Counts towards no window, no ban and no concurrency limit, and spends no credits (the record counts the call itself as a request of 0 units); limited to ${FREE_CALLS_PER_MINUTE} calls a minute per key of its own (429 \`rate_limited\`).`,
        querystring: OwnUsageQuery,
        response: {
          200: {
            ...OwnUsageRows,
            headers: { link: { type: 'string', description: 'RFC 8288 rel="next" link, when more rows follow' } },
          },
          400: ErrorBody,
        },
      },
      config: { cost: FREE_CALL_COST, volatile: true },
    },
    async (request, reply) => {
      const { query } = request;
      const key = request.apiKey!;
      const granularity = query.granularity ?? 'hour';
      const usageQuery = { owner: ownerOf(key, query.scope ?? 'key'), granularity, groupBy: query.groupBy, ...rangeOf(query, granularity) };
      const after =
        query.cursor === undefined
          ? undefined
          : decodeUsageCursor(query.cursor, usageQuery, 'the scope, granularity, start, end and groupBy');
      // Spent once the query is known to be answerable: a malformed one costs nothing of the limit.
      await app.rateLimit.spendFreeCall(key, GET_USAGE, app.now());
      const { rows, next } = await usagePage(usage, usageQuery, after, query.limit ?? DEFAULT_USAGE_PAGE);
      if (next) {
        const { start, end, scope, groupBy, limit } = query;
        reply.header(
          'link',
          nextLink(`${base}/usage`, { granularity: query.granularity, start, end, scope, groupBy, limit, cursor: next }),
        );
      }
      return rows;
    },
  );
  refuseOtherMethods(app, '/usage', ['GET']);
};

export default usageRoutes;
