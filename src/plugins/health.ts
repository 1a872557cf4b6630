import fp from 'fastify-plugin';
import { ErrorBody } from '../schemas/error.js';
import { Type } from '@sinclair/typebox';
import { errors, sendApiError } from '../errors.js';
import { ALWAYS_ANSWER } from './load-shedding.js';

const Status = Type.Object({ status: Type.String() });

/** Liveness and readiness for orchestrators and load balancers: outside /v1, no auth. */
export default fp(
  async function health(app) {
    // Liveness stays up under overload, or an orchestrator would restart a busy instance.
    app.get('/healthz', { schema: { hide: true, response: { 200: Status } }, config: { public: true, ...ALWAYS_ANSWER } }, async () => ({
      status: 'ok',
    }));

    app.get(
      '/readyz',
      { schema: { hide: true, response: { 200: Status, 503: ErrorBody } }, config: { public: true } },
      async (request, reply) => {
        // First, on SIGTERM: balancers stop sending here while the instance still serves what comes.
        if (app.shutdown.draining) {
          return sendApiError(reply, errors.unavailable('The server is shutting down'));
        }
        if (app.isUnderPressure()) {
          return sendApiError(reply, errors.unavailable('The service is overloaded'));
        }
        try {
          await app.db.query('SELECT 1');
          return { status: 'ready' };
        } catch (error) {
          request.log.warn({ err: error }, 'readiness check failed: database unreachable');
          return sendApiError(reply, errors.unavailable('Database is unreachable'));
        }
      },
    );
  },
  { name: 'health', dependencies: ['database', 'load-shedding', 'shutdown'] },
);
