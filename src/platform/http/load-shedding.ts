import underPressure from '@fastify/under-pressure';
import fp from 'fastify-plugin';
import { errors, sendApiError } from '../errors.js';

export interface LoadSheddingOptions {
  maxEventLoopDelayMs: number;
  maxPoolWaiting: number;
}

/** Route config that keeps a route answering under pressure. */
export const ALWAYS_ANSWER = { pressureHandler: () => undefined };

/**
 * Under overload (a lagging event loop, or too many requests queued for a database connection)
 * every request is answered at once with 503 and Retry-After, instead of waiting longer and
 * longer. A route can opt out through its config (liveness must stay up).
 */
export default fp<LoadSheddingOptions>(
  async function loadShedding(app, { maxEventLoopDelayMs, maxPoolWaiting }) {
    await app.register(underPressure, {
      maxEventLoopDelay: maxEventLoopDelayMs,
      healthCheck: async () => (app.db.poolStats?.().waiting ?? 0) <= maxPoolWaiting,
      healthCheckInterval: 500,
      pressureHandler: (_request, reply) => {
        sendApiError(reply, errors.unavailable('The service is overloaded; retry later'));
      },
    });
  },
  { name: 'load-shedding', dependencies: ['database'] },
);
