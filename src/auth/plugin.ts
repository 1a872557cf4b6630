import fp from 'fastify-plugin';
import { Counter } from 'prom-client';
import type { FastifyContextConfig, FastifyRequest } from 'fastify';
import { hashKey, isPlausibleKey } from '../api-keys/format.js';
import { errors, type ApiError } from '../platform/errors.js';
import { bearerToken } from '../platform/http/bearer.js';
import type { RequestLogCaller } from '../platform/http/request-log.js';
import { annotateRequestSpan } from '../platform/observability/tracing.js';
import type { ApiKeyIdentity } from '../api-keys/identity.js';

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

/** The caller each request's log line names: the id of the key the request authenticated with. */
export const KEY_IN_REQUEST_LOG: RequestLogCaller = { field: 'keyId', idOf: (request) => request.apiKey?.id };

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

/**
 * What authenticate made of a request: its credential (still unverified when its address, banned,
 * may not look a key up), or the refusal of a lookup its address had no budget left for (429).
 */
export type Authentication = Credential | { kind: 'lookup-refused'; refusal: ApiError };

export interface Authenticator {
  /** From memory alone: never asks the database. */
  identify(request: FastifyRequest): Credential;
  /**
   * Who the request is, refusing nothing: identified from memory; a key not known here is looked
   * up in the database (once, however many requests ask at the same time) unless its address may
   * not spend a lookup (the rate limiter's budget). A valid key becomes `request.apiKey`.
   */
  authenticate(request: FastifyRequest, now: number): Promise<Authentication>;
  /**
   * Why a request so authenticated may not go on here (401, 403, or the 429 of its lookup), if it may not: `config` is
   * its route's, `origin` its `Origin` header (a browser key's request must come from one of its origins).
   */
  refusal(authentication: Authentication, config: FastifyContextConfig, origin: string | undefined): ApiError | undefined;
  /**
   * The caller's key: the one authenticate found, or, for a request answered before it was
   * authenticated (load shedding, shutdown, a key lookup that failed), the one memory knows.
   */
  keyOf(request: FastifyRequest): ApiKeyIdentity | undefined;
}

/** Set once authenticate has returned: a request decoration only this module can name. */
const AUTHENTICATED = Symbol('authenticated');
type Authenticated = FastifyRequest & { [AUTHENTICATED]?: true };

export const SECURITY_SCHEME = 'bearerAuth';

/**
 * Bearer API keys, checked against the key cache and, on a miss, the database, within the budget of
 * lookups per client the limiter keeps (app.rateLimit.spendLookup). The pipeline under /v1 (v1/pipeline.ts)
 * authenticates, lets the limiter count the request, and only then refuses.
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

    function identify(request: FastifyRequest): Credential {
      if (request.routeOptions.config.public) return { kind: 'public' };
      const token = bearerToken(request.headers.authorization);
      if (!token) return { kind: 'missing' };
      // A key that cannot be ours (its shape, or its checksum) never reaches the cache or the database;
      // one held as usable was checked and hashed on its first use.
      let hash = app.keyCache.knownHash(token);
      if (hash === undefined) {
        if (!isPlausibleKey(token)) return { kind: 'invalid' };
        hash = hashKey(token).toString('base64');
      }
      const known = app.keyCache.get(hash);
      if (known === undefined || known === 'stale') return { kind: 'unverified', hash, recheck: known === 'stale' };
      return usable(known);
    }

    async function verify(request: FastifyRequest, { hash }: Extract<Credential, { kind: 'unverified' }>): Promise<Credential> {
      const found = await app.keyCache.lookUp(hash, bearerToken(request.headers.authorization)!);
      lookups.inc({ outcome: found ? 'found' : 'unknown' });
      return usable(found);
    }

    /** Verifies a key because the filter holds it, and tells the filter when it held no usable key. */
    async function verifyListed(request: FastifyRequest, credential: Extract<Credential, { kind: 'unverified' }>): Promise<Credential> {
      const verified = await verify(request, credential);
      if (verified.kind !== 'key') app.keyFilter.heldNoKey();
      return verified;
    }

    app.decorateRequest('apiKey', undefined);
    app.decorateRequest(AUTHENTICATED, undefined);
    const recordIdentity = <A extends Authentication>(request: FastifyRequest, authentication: A): A => {
      if (authentication.kind === 'key') {
        request.apiKey = authentication.key;
        annotateRequestSpan(request, { keyId: authentication.key.id });
      }
      (request as Authenticated)[AUTHENTICATED] = true;
      return authentication;
    };

    app.decorate('auth', {
      identify,

      async authenticate(request, now) {
        const credential = identify(request);
        if (credential.kind !== 'unverified') return recordIdentity(request, credential);
        if (credential.recheck) return recordIdentity(request, await verify(request, credential));
        // A key stored as far as the filter knows is looked up whatever its address did; any other
        // spends the address's budget (a key made a moment ago elsewhere, whose notice is on its way).
        if (app.keyFilter.mayHold(credential.hash)) return recordIdentity(request, await verifyListed(request, credential));
        const spent = await app.rateLimit.spendLookup(request.ip, now);
        if (spent.lookUp) return recordIdentity(request, await verify(request, credential));
        // About to be refused: the notice of a key made a moment ago elsewhere may still be on its
        // way. Once every notice sent before now is applied here, the filter tells.
        if ((await app.keyNotices.catchUp()) && app.keyFilter.mayHold(credential.hash))
          return recordIdentity(request, await verifyListed(request, credential));
        return recordIdentity(request, spent.refusal ? { kind: 'lookup-refused', refusal: spent.refusal } : credential);
      },

      refusal(authentication, config, origin) {
        if (authentication.kind === 'lookup-refused') return authentication.refusal;
        if (authentication.kind === 'missing') return errors.credentialsMissing();
        if (authentication.kind === 'invalid' || authentication.kind === 'unverified') return errors.credentialsInvalid();
        if (authentication.kind !== 'key') return undefined;
        const { allowedOrigins, readOnly } = authentication.key;
        // Compared exactly: the key's origins are stored as browsers send them (src/api-keys/origins.ts).
        if (allowedOrigins !== null && (origin === undefined || !allowedOrigins.includes(origin))) return errors.originNotAllowed(origin);
        if (readOnly && config.writes) return errors.readOnlyKey();
        return undefined;
      },

      keyOf(request) {
        if ((request as Authenticated)[AUTHENTICATED]) return request.apiKey;
        const credential = identify(request);
        return credential.kind === 'key' ? credential.key : undefined;
      },
    } satisfies Authenticator);
  },
  { name: 'auth', dependencies: ['api-keys', 'rate-limit', 'metrics'] },
);
