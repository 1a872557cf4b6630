import fp from 'fastify-plugin';
import { hashKey, isPlausibleAdminToken } from '../api-keys/format.js';
import { errors } from '../platform/errors.js';
import { bearerToken } from '../platform/http/bearer.js';
import type { RequestLogCaller } from '../platform/http/request-log.js';
import type { Actor } from '../audit/repository.js';
import type { AdminTokenIdentity, AdminTokensRepository } from './tokens-repository.js';
import type { FastifyRequest } from 'fastify';

declare module 'fastify' {
  interface FastifyRequest {
    /** The admin token an admin request authenticated with. */
    adminToken?: AdminTokenIdentity;
  }
}

export const ADMIN_SECURITY_SCHEME = 'adminToken';

/** The caller each admin request's log line names: its token's id (never the token itself). */
export const TOKEN_IN_REQUEST_LOG: RequestLogCaller = { field: 'adminTokenId', idOf: (request) => request.adminToken?.id };

/** Who an admin request's changes are recorded as: its token and its request id. */
export const actorOf = (request: FastifyRequest): Actor => ({
  name: 'admin-api',
  adminTokenId: request.adminToken!.id,
  requestId: request.id,
});

/**
 * Every admin request but the documents needs `Authorization: Bearer <admin token>`: 401 without
 * a usable one (an API key is not one), 403 when a read token calls an operation that writes.
 * The token is looked up on every request: admin traffic is light, and a revoked token is then
 * refused at once on every instance.
 */
export default fp<{ tokens: AdminTokensRepository }>(
  async function adminAuth(admin, { tokens }) {
    admin.decorateRequest('adminToken', undefined);
    admin.addHook('onRequest', async (request) => {
      const { config } = request.routeOptions;
      if (config.public) return;
      const token = bearerToken(request.headers.authorization);
      if (!token) throw errors.adminTokenMissing();
      // A token that cannot be ours (its prefix, shape or checksum) never reaches the database.
      const identity = isPlausibleAdminToken(token) ? await tokens.findUsable(hashKey(token)) : undefined;
      if (!identity) throw errors.adminTokenInvalid();
      if (config.writes && identity.scope !== 'write') throw errors.readOnlyAdminToken();
      request.adminToken = identity;
    });
  },
  { name: 'admin-auth' },
);
