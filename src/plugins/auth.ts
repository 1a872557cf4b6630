import fp from 'fastify-plugin';
import { ApiError } from '../errors.js';
import { Keyring } from '../keyring.js';
import type { ApiKeyIdentity } from '../repositories/api-keys.js';
import { ErrorBody } from '../schemas/error.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Served without credentials (documents, health). */
    public?: boolean;
  }
  interface FastifyRequest {
    /** The key the request authenticated with. */
    apiKey?: ApiKeyIdentity;
    /** Why it did not, for a request that must be refused. */
    authFailure?: 'missing' | 'invalid';
  }
}

const REALM = 'Bearer realm="pets"';
const BEARER = /^Bearer +(.*)$/i;

export const SECURITY_SCHEME = 'bearerAuth';

/**
 * Bearer API keys on every route of the context it is registered in, unless its config says
 * `public`. Identification (onRequest) and refusal (preParsing) are apart so that the rate
 * limiter, registered between them, counts and limits unauthenticated callers too.
 */
export default fp(
  async function auth(app) {
    const keyring = new Keyring(app.apiKeysRepository);
    await keyring.start(app.db, (error) => app.log.error({ err: error }, 'could not refresh the API keys'));
    app.addHook('onClose', () => keyring.stop());

    app.decorateRequest('apiKey', undefined);
    app.decorateRequest('authFailure', undefined);

    app.addHook('onRoute', (route) => {
      if (route.config?.public || route.schema?.hide) return;
      route.schema = {
        ...route.schema,
        security: [{ [SECURITY_SCHEME]: [] }],
        response: {
          ...(route.schema?.response as object),
          401: {
            ...ErrorBody,
            description: 'API key missing or invalid',
            headers: { 'www-authenticate': { type: 'string', description: 'Bearer realm="pets" (RFC 6750)' } },
          },
        },
      };
    });

    app.addHook('onRequest', async (request) => {
      if (request.routeOptions.config.public) return;
      const token = BEARER.exec(request.headers.authorization ?? '')?.[1]?.trim();
      if (!token) {
        request.authFailure = 'missing';
        return;
      }
      request.apiKey = keyring.identify(token);
      if (!request.apiKey) request.authFailure = 'invalid';
    });

    app.addHook('preParsing', async (request) => {
      if (request.authFailure === 'missing') {
        throw new ApiError(401, 'unauthorized', 'Authentication required: send Authorization: Bearer <API key>', {
          'www-authenticate': REALM,
        });
      }
      if (request.authFailure === 'invalid') {
        throw new ApiError(401, 'unauthorized', 'The API key is invalid or has been revoked', {
          'www-authenticate': `${REALM}, error="invalid_token"`,
        });
      }
    });
  },
  { name: 'auth', dependencies: ['database', 'repositories'] },
);
