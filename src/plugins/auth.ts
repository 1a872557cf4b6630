import fp from 'fastify-plugin';
import { Counter, Gauge } from 'prom-client';
import { hashKey, isPlausibleKey } from '../api-key-format.js';
import { ApiError } from '../errors.js';
import { KeyCache } from '../key-cache.js';
import type { ApiKeyIdentity } from '../repositories/api-keys.js';
import { ErrorBody } from '../schemas/error.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Served without credentials (documents, health). */
    public?: boolean;
    /** Changes data: refused (403) to read-only keys. */
    writes?: boolean;
  }
  interface FastifyRequest {
    /** The key the request authenticated with. */
    apiKey?: ApiKeyIdentity;
    /** Why it did not, for a request that must be refused. */
    authFailure?: 'missing' | 'invalid';
    /**
     * A plausible key this instance has not seen yet: the rate limiter charges the caller's
     * address before anything asks the database (see resolveKey), so a flood of made-up keys
     * is limited per address instead of landing on the database.
     */
    keyToLookUp?: string;
  }
  interface FastifyInstance {
    /** Finishes what onRequest left open: looks keyToLookUp up and settles apiKey or authFailure. */
    resolveKey(request: FastifyRequest): Promise<void>;
  }
}

export interface AuthOptions {
  /** API keys each instance keeps in memory at most. */
  keyCacheMaxEntries: number;
  now: () => number;
}

const REALM = 'Bearer realm="pets"';
const BEARER = /^Bearer +(.*)$/i;

export const SECURITY_SCHEME = 'bearerAuth';

/**
 * Bearer API keys on every route of the context it is registered in, unless its config says
 * `public`. Identification (onRequest) and refusal (preParsing) are apart so that the rate
 * limiter, registered between them, counts and limits unauthenticated callers too.
 */
export default fp<AuthOptions>(
  async function auth(app, { keyCacheMaxEntries, now }) {
    const keys = new KeyCache(app.apiKeysRepository, { maxEntries: keyCacheMaxEntries, now });
    const lookups = new Counter({
      name: 'api_key_lookups_total',
      help: 'API keys looked up in the database on first use, by outcome: found, or unknown (no usable key)',
      labelNames: ['outcome'] as const,
      registers: [app.metricsRegistry],
    });
    new Gauge({
      name: 'api_key_cache_entries',
      help: 'API keys (and unknown hashes) this instance holds in memory',
      registers: [app.metricsRegistry],
      collect() {
        this.set(keys.size);
      },
    });
    // Notices lost while the listening connection was down: forget every key when it is back.
    const stopListening = await app.db.listen(
      'api_key_changed',
      (payload) => keys.invalidate(payload === '*' ? '*' : payload.split(',').map(Number)),
      () => keys.invalidate('*'),
    );
    app.addHook('onClose', stopListening);

    app.decorateRequest('apiKey', undefined);
    app.decorateRequest('authFailure', undefined);
    app.decorateRequest('keyToLookUp', undefined);

    /** A known key, unless it has expired: then it is refused like an unknown one. */
    const usable = (identity: ApiKeyIdentity | null | undefined) =>
      identity && (identity.expiresAt === null || identity.expiresAt > now()) ? identity : undefined;

    app.decorate('resolveKey', async (request) => {
      const hash = request.keyToLookUp;
      if (hash === undefined) return;
      request.keyToLookUp = undefined;
      const found = await keys.lookUp(hash);
      lookups.inc({ outcome: found ? 'found' : 'unknown' });
      request.apiKey = usable(found);
      if (!request.apiKey) request.authFailure = 'invalid';
    });

    app.addHook('onRoute', (route) => {
      if (route.config?.public || route.schema?.hide) return;
      route.schema = {
        ...route.schema,
        security: [{ [SECURITY_SCHEME]: [] }],
        response: {
          ...(route.schema?.response as object),
          401: {
            ...ErrorBody,
            description: 'API key missing, invalid, revoked or expired',
            headers: { 'www-authenticate': { type: 'string', description: 'Bearer realm="pets" (RFC 6750)' } },
          },
          ...(route.config?.writes && { 403: { ...ErrorBody, description: 'The API key is read-only (`forbidden`)' } }),
        },
      };
    });

    // A callback hook: it runs on every request, and needs no promise.
    app.addHook('onRequest', (request, _reply, done) => {
      if (request.routeOptions.config.public) return done();
      const token = BEARER.exec(request.headers.authorization ?? '')?.[1]?.trim();
      if (!token) {
        request.authFailure = 'missing';
        return done();
      }
      // A key that cannot be ours (its shape, or its checksum) never reaches the cache or the database.
      if (!isPlausibleKey(token)) {
        request.authFailure = 'invalid';
        return done();
      }
      const hash = hashKey(token).toString('base64');
      const known = keys.peek(hash);
      if (known === undefined) request.keyToLookUp = hash;
      else if (!(request.apiKey = usable(known))) request.authFailure = 'invalid';
      done();
    });

    app.addHook('preParsing', async (request) => {
      if (request.authFailure === 'missing') {
        throw new ApiError(401, 'unauthorized', 'Authentication required: send Authorization: Bearer <API key>', {
          'www-authenticate': REALM,
        });
      }
      if (request.authFailure === 'invalid') {
        throw new ApiError(401, 'unauthorized', 'The API key is invalid, revoked or expired', {
          'www-authenticate': `${REALM}, error="invalid_token"`,
        });
      }
      if (request.apiKey?.readOnly && request.routeOptions.config.writes) {
        throw new ApiError(403, 'forbidden', 'This API key is read-only; use a key with write access to change data');
      }
    });
  },
  { name: 'auth', dependencies: ['database', 'repositories', 'metrics'] },
);
