import type { FastifyInstance } from 'fastify';
import { errors } from '../errors.js';

/** The methods a path may have (OPTIONS aside, which is CORS's: platform/http/cors.ts). */
export const HTTP_METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'];

/**
 * Answers the methods a path does not support with 405 and an Allow header (RFC 9110), in the
 * caller's context so those requests pass the same hooks as the real operations. A CORS preflight
 * (an OPTIONS) of the path is told the same methods.
 */
export function refuseOtherMethods(app: FastifyInstance, url: string, allowed: string[]) {
  const allow = allowed.includes('GET') ? [...allowed, 'HEAD'] : allowed;
  app.route({
    method: [...HTTP_METHODS, 'OPTIONS'].filter((method) => !allow.includes(method)),
    url,
    schema: { hide: true },
    config: { cors: { methods: allow } },
    handler: async () => {
      throw errors.methodNotAllowed(allow);
    },
  });
}
