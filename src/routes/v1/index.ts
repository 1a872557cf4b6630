import type { FastifyPluginAsync } from 'fastify';
import auth from '../../plugins/auth.js';
import conditionalRequests from '../../plugins/conditional-requests.js';
import deprecation from '../../plugins/deprecation.js';
import idempotency from '../../plugins/idempotency.js';
import { notFoundHandler } from '../../errors.js';
import rateLimit, { type RateLimitOptions } from '../../plugins/rate-limit/index.js';
import pets from './pets.js';

export const API_PREFIX = '/v1';

export interface V1Options {
  /** The clock of authentication (key expiry), rate limiting and deprecation, in ms since the epoch. */
  now: () => number;
  keyCacheMaxEntries: number;
  idempotencyKeyRetentionHours: number;
  rateLimit: Omit<RateLimitOptions, 'now'>;
}

/**
 * Everything under /v1: auth identifies the caller, the rate limiter counts every request
 * (unknown paths too, through this context's own not-found handler), then the operations.
 * Each plugin adds to the documentation of every route as it is declared (onRoute), in this
 * order, which their plugin dependencies enforce: the limiter's headers go on the responses the
 * ones before it add (auth's 401, idempotency's 409 and 422, the 304 of conditional requests),
 * and deprecation's headers on all of them.
 */
const v1: FastifyPluginAsync<V1Options> = async (app, { now, keyCacheMaxEntries, idempotencyKeyRetentionHours, rateLimit: limits }) => {
  await app.register(auth, { keyCacheMaxEntries, now });
  await app.register(idempotency, { retentionHours: idempotencyKeyRetentionHours });
  await app.register(conditionalRequests, { dataVersion: app.petsVersion, now });
  await app.register(rateLimit, { ...limits, now });
  await app.register(deprecation, { now });
  app.setNotFoundHandler(notFoundHandler);
  app.get('/openapi.json', { schema: { hide: true }, config: { public: true } }, async () => app.swagger());
  await app.register(pets);
};

export default v1;
