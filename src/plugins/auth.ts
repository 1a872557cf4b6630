import fp from 'fastify-plugin';
import { Counter } from 'prom-client';
import type { FastifyContextConfig, FastifyRequest } from 'fastify';
import { hashKey, isPlausibleKey } from '../api-key-format.js';
import { errors, type ApiError } from '../errors.js';
import type { ApiKeyIdentity } from '../repositories/api-keys.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Served without credentials (documents, health). */
    public?: boolean;
    /** Changes data: refused (403) to read-only keys. */
    writes?: boolean;
  }
  interface FastifyRequest {
    /** The key the request authenticated with: the caller's identity, for every concern after auth. */
    apiKey?: ApiKeyIdentity;
  }
  interface FastifyInstance {
    auth: Authenticator;
  }
}

/** What a request presents, as far as this instance can tell. */
export type Credential =
  | { kind: 'public' }
  | { kind: 'missing' }
  | { kind: 'invalid' }
  | { kind: 'key'; key: ApiKeyIdentity }
  /**
   * A plausible key to look up in the database: one this instance has not seen (`recheck` false),
   * or one that was valid when last looked up and must be looked up again (`recheck` true).
   */
  | { kind: 'unverified'; hash: string; recheck: boolean };

export interface Authenticator {
  /** From memory alone: never asks the database. */
  identify(request: FastifyRequest): Credential;
  /** Looks an unverified key up in the database (once, however many requests ask at the same time). */
  verify(credential: Extract<Credential, { kind: 'unverified' }>): Promise<Credential>;
  /** Why a request with this credential may not go on here (401 or 403), if it may not. */
  refusal(credential: Credential, config: FastifyContextConfig): ApiError | undefined;
}

export const BEARER = /^Bearer +(.*)$/i;

export const SECURITY_SCHEME = 'bearerAuth';

/**
 * Bearer API keys, checked against the key cache and, on a miss, the database. The pipeline under
 * /v1 (routes/v1/index.ts) identifies, lets the rate limiter decide what a lookup may cost,
 * verifies, and refuses only after the limiter has counted the request.
 */
export default fp(
  async function auth(app) {
    const lookups = new Counter({
      name: 'api_key_lookups_total',
      help: 'API keys looked up in the database on first use, by outcome: found, or unknown (no usable key)',
      labelNames: ['outcome'] as const,
      registers: [app.metricsRegistry],
    });

    /** A known key, unless it has expired: then it is refused like an unknown one. */
    const usable = (identity: ApiKeyIdentity | null | undefined): Credential =>
      identity && (identity.expiresAt === null || identity.expiresAt > app.now()) ? { kind: 'key', key: identity } : { kind: 'invalid' };

    app.decorateRequest('apiKey', undefined);
    app.decorate('auth', {
      identify(request) {
        if (request.routeOptions.config.public) return { kind: 'public' };
        const token = BEARER.exec(request.headers.authorization ?? '')?.[1]?.trim();
        if (!token) return { kind: 'missing' };
        // A key that cannot be ours (its shape, or its checksum) never reaches the cache or the database.
        if (!isPlausibleKey(token)) return { kind: 'invalid' };
        const hash = hashKey(token).toString('base64');
        const known = app.keyCache.get(hash);
        if (known === undefined || known === 'stale') return { kind: 'unverified', hash, recheck: known === 'stale' };
        return usable(known);
      },

      async verify({ hash }) {
        const found = await app.keyCache.lookUp(hash);
        lookups.inc({ outcome: found ? 'found' : 'unknown' });
        return usable(found);
      },

      refusal(credential, config) {
        if (credential.kind === 'missing') return errors.credentialsMissing();
        if (credential.kind === 'invalid' || credential.kind === 'unverified') return errors.credentialsInvalid();
        if (credential.kind === 'key' && credential.key.readOnly && config.writes) return errors.readOnlyKey();
        return undefined;
      },
    } satisfies Authenticator);
  },
  { name: 'auth', dependencies: ['api-keys', 'metrics'] },
);
