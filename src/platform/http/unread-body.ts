import type { onSendHookHandler } from 'fastify';

/**
 * An answer sent before the request's body was read (a 401, a 429, a 415) closes the connection:
 * kept open, it would wait for a body nobody reads, up to the request timeout, or read it in vain.
 */
export const closeIfBodyUnread: onSendHookHandler = (request, reply, payload, done) => {
  if (!request.raw.complete) reply.header('connection', 'close');
  done(null, payload);
};
