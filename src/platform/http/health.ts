import fp from 'fastify-plugin';
import { ErrorBody } from '../schemas/error.js';
import { Type } from '@sinclair/typebox';
import { errors, sendApiError } from '../errors.js';
import { ALWAYS_ANSWER } from './load-shedding.js';

const Status = Type.Object({ status: Type.String() });

/** How long one database check answers every readiness probe: a flood of /readyz costs one query a second. */
const DATABASE_CHECK_REUSE_MS = 1_000;

/** Liveness and readiness for orchestrators and load balancers: outside /v1, no auth. */
export default fp(
  async function health(app) {
    // The database check under way, or the last one: probes while it runs share it, and its answer
    // stands for DATABASE_CHECK_REUSE_MS after it settled. /readyz is unauthenticated and not rate limited.
    let check: Promise<boolean> | undefined;
    let checkSettledAt = Infinity;
    const databaseAnswers = () => {
      if (check && app.now() - checkSettledAt < DATABASE_CHECK_REUSE_MS) return check;
      checkSettledAt = Infinity;
      check = app.db
        .query('SELECT 1')
        .then(
          () => true,
          (error: unknown) => {
            app.log.warn({ err: error }, 'readiness check failed: database unreachable');
            return false;
          },
        )
        .finally(() => (checkSettledAt = app.now()));
      return check;
    };

    // Liveness stays up under overload, or an orchestrator would restart a busy instance.
    app.get('/healthz', { schema: { hide: true, response: { 200: Status } }, config: { public: true, ...ALWAYS_ANSWER } }, async () => ({
      status: 'ok',
    }));

    app.get(
      '/readyz',
      { schema: { hide: true, response: { 200: Status, 503: ErrorBody } }, config: { public: true } },
      async (_request, reply) => {
        // First, on SIGTERM: balancers stop sending here while the instance still serves what comes.
        if (app.shutdown.draining) {
          return sendApiError(reply, errors.unavailable('The server is shutting down'));
        }
        if (app.isUnderPressure()) {
          return sendApiError(reply, errors.unavailable('The service is overloaded'));
        }
        if (await databaseAnswers()) return { status: 'ready' };
        return sendApiError(reply, errors.unavailable('Database is unreachable'));
      },
    );
  },
  { name: 'health', dependencies: ['database', 'load-shedding', 'shutdown'] },
);
