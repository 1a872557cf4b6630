import fp from 'fastify-plugin';
import { sendError } from '../errors.js';

/**
 * Shutting down (SIGTERM): in-flight requests finish, and every response sent meanwhile closes
 * its connection, or idle keep-alives would hold up the exit until their timeout. Requests that
 * still arrive on open connections get the service's 503 with Retry-After (Fastify's own 503,
 * return503OnClosing, is not an Error body) before any work is done.
 */
export default fp(
  async function shutdown(app) {
    let closing = false;
    app.addHook('preClose', async () => {
      closing = true;
    });
    // Both run on every request, so they are callback hooks: no promise each time.
    app.addHook('onRequest', (_request, reply, done) => {
      if (!closing) return done();
      sendError(reply.header('retry-after', '5'), 503, 'service_unavailable', 'The server is shutting down; retry later');
    });
    app.addHook('onSend', (_request, reply, payload, done) => {
      if (closing) reply.header('connection', 'close');
      done(null, payload);
    });
  },
  { name: 'shutdown' },
);
