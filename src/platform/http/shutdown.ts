import fp from 'fastify-plugin';
import { errors, sendApiError } from '../errors.js';

declare module 'fastify' {
  interface FastifyInstance {
    shutdown: {
      /**
       * The first step of a SIGTERM (src/server.ts): /readyz answers 503 so that balancers and
       * orchestrators stop sending new work here, while every other request is still served.
       */
      drain(): void;
      /** Draining or closing: this instance must not be reported ready. */
      readonly draining: boolean;
    };
  }
}

/**
 * Shutting down, in two steps.
 *
 * Draining (SIGTERM, for SHUTDOWN_DRAIN_MS): /readyz answers 503 (src/platform/http/health.ts) and
 * everything else is served as usual, each response with Connection: close, so a client or proxy
 * holding a keep-alive connection opens its next one through its balancer, which by then sends it
 * elsewhere, and none is left idle on this instance when it closes.
 *
 * Closing (app.close()): the listening socket closes and in-flight requests finish, each response
 * with Connection: close, or idle keep-alives would hold up the exit until their timeout. Requests
 * that still arrive on open connections in that last moment get the service's 503 with Retry-After
 * (Fastify's own 503, return503OnClosing, is not an Error body) before any work is done.
 */
export default fp(
  async function shutdown(app) {
    let draining = false;
    let closing = false;
    app.decorate('shutdown', {
      drain() {
        draining = true;
      },
      get draining() {
        return draining || closing;
      },
    });
    app.addHook('preClose', async () => {
      closing = true;
    });
    // Both run on every request, so they are callback hooks: no promise each time.
    app.addHook('onRequest', (_request, reply, done) => {
      if (!closing) return done();
      sendApiError(reply, errors.unavailable('The server is shutting down; retry later'));
    });
    app.addHook('onSend', (_request, reply, payload, done) => {
      if (draining || closing) reply.header('connection', 'close');
      done(null, payload);
    });
  },
  { name: 'shutdown' },
);
