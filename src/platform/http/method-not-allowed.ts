import type { FastifyInstance } from 'fastify';
import { errors } from '../errors.js';

const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'];

/**
 * Answers the methods a path does not support with 405 and an Allow header (RFC 9110), in the
 * caller's context so those requests pass the same hooks as the real operations.
 */
export function refuseOtherMethods(app: FastifyInstance, url: string, allowed: string[]) {
  const allow = allowed.includes('GET') ? [...allowed, 'HEAD'] : allowed;
  app.route({
    method: METHODS.filter((method) => !allow.includes(method)),
    url,
    schema: { hide: true },
    handler: async () => {
      throw errors.methodNotAllowed(allow);
    },
  });
}
