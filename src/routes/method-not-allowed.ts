import type { FastifyInstance } from 'fastify';
import { ApiError } from '../errors.js';

const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'];

/**
 * Answers the methods a path does not support with 405 and an Allow header (RFC 9110), in the
 * caller's context so those requests pass the same hooks as the real operations.
 */
export function refuseOtherMethods(app: FastifyInstance, url: string, allowed: string[]) {
  const allow = allowed.includes('GET') ? [...allowed, 'HEAD'] : allowed;
  const message = `Only ${allow.join(', ')} are supported on this path`;
  app.route({
    method: METHODS.filter((method) => !allow.includes(method)),
    url,
    schema: { hide: true },
    handler: async () => {
      throw new ApiError(405, 'method_not_allowed', message, { allow: allow.join(', ') });
    },
  });
}
