import type { FastifyPluginAsync } from 'fastify';
import auth from '../../plugins/auth.js';
import deprecation from '../../plugins/deprecation.js';
import { notFoundHandler } from '../../errors.js';
import rateLimit, { type RateLimitOptions } from '../../plugins/rate-limit/index.js';
import pets from './pets.js';

export const API_PREFIX = '/v1';

/**
 * Everything under /v1: auth identifies the caller, the rate limiter counts every request
 * (unknown paths too, through this context's own not-found handler), then the operations.
 */
export interface V1Options {
  /** The clock of rate limiting and deprecation, in ms since the epoch. */
  now: () => number;
  rateLimit: Omit<RateLimitOptions, 'now'>;
}

const v1: FastifyPluginAsync<V1Options> = async (app, { now, rateLimit: limits }) => {
  await app.register(auth);
  await app.register(rateLimit, { ...limits, now });
  await app.register(deprecation, { now });
  app.setNotFoundHandler(notFoundHandler);
  app.get('/openapi.json', { schema: { hide: true }, config: { public: true } }, async () => app.swagger());
  await app.register(pets);
};

export default v1;
