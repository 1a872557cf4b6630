import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { refuseOtherMethods } from '../platform/http/method-not-allowed.js';
import { ErrorBody } from '../platform/schemas/error.js';
import { FREE_CALL_COST, FREE_CALLS_PER_MINUTE, type FreeCall } from './free-calls.js';
import { RateLimitStatus } from './schemas.js';

export interface RateLimitRoutesOptions {
  /** The operations the API serves (their operationIds), whose costs the answer lists. */
  operations: () => string[];
}

const GET_RATE_LIMIT: FreeCall = { operationId: 'getRateLimit', route: 'GET /v1/rate_limit' };

const remainingOf = ({ limit, used }: { limit: number; used: number }) => Math.max(0, limit - used);

/**
 * GitHub's GET /rate_limit: a caller learns its standing without spending any of it. A free
 * operation (free-calls.ts): the lookups have a limit of their own, spent before the standing is read.
 */
const rateLimitRoutes: FastifyPluginAsyncTypebox<RateLimitRoutesOptions> = async (app, { operations }) => {
  app.get(
    '/rate_limit',
    {
      schema: {
        operationId: GET_RATE_LIMIT.operationId,
        tags: ['rate limits'],
        summary: "The key's rate limits and what is left of them; spends nothing of any window",
        description: `Counts towards no window, no ban and no concurrency limit, and spends no credits; limited to ${FREE_CALLS_PER_MINUTE} calls a minute per key of its own (429 \`rate_limited\`). A banned key gets its 429 \`api_key_banned\` here too.`,
        response: { 200: RateLimitStatus, 400: ErrorBody },
      },
      config: { cost: FREE_CALL_COST, volatile: true },
    },
    async (request) => {
      const key = request.apiKey!;
      const now = app.now();
      await app.rateLimit.spendFreeCall(key, GET_RATE_LIMIT, now);
      const standing = await app.rateLimit.standing(key, now);
      const named = (name: string) => {
        const window = standing.windows.find((window) => window.name === name);
        return (
          window && { limit: window.limit, remaining: remainingOf(window), used: window.used, reset: Math.ceil(window.resetAt / 1000) }
        );
      };
      return {
        plan: key.plan,
        windows: standing.windows.map((window) => ({
          name: window.name,
          limit: window.limit,
          remaining: remainingOf(window),
          windowSeconds: window.windowSeconds,
          resetAt: new Date(window.resetAt).toISOString(),
        })),
        minute: named('minute'),
        day: named('day'),
        concurrency: standing.concurrency,
        credits: standing.credits && {
          remaining: standing.credits.remaining,
          refillAt: standing.credits.refillAt === null ? null : new Date(standing.credits.refillAt).toISOString(),
        },
        costs: Object.fromEntries(operations().map((operation) => [operation, app.rateLimit.costOf(operation)])),
      };
    },
  );
  refuseOtherMethods(app, '/rate_limit', ['GET']);
};

export default rateLimitRoutes;
