import fp from 'fastify-plugin';
import { hash } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { TSchema } from '@sinclair/typebox';
import { stringify } from 'safe-stable-stringify';
import type { Transaction } from '../platform/db/database.js';
import { errors, RETRY_AFTER_HEADERS } from '../platform/errors.js';
import type { IdempotencyKeysRepository, IdempotentOutcome, StoredResponse } from './repository.js';
import { ErrorBody } from '../platform/schemas/error.js';
import { IdempotencyKey, idempotencyKeyOf } from '../platform/schemas/headers.js';
import { withHeaders, withRequestHeaders, type ResponseSchemas } from '../platform/schemas/responses.js';
import { MINUTE_MS } from '../platform/time.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Takes an Idempotency-Key: its handler answers through app.idempotently. */
    idempotent?: boolean;
  }
  interface FastifyInstance {
    /**
     * Answers a request of an idempotent route: without an Idempotency-Key, `work` runs as usual
     * (no transaction); with one, it runs at most once per key, in a transaction that stores its
     * response, and every retry gets that response back.
     */
    idempotently<Body, Status extends number>(
      request: FastifyRequest,
      reply: FastifyReply,
      work: (tx?: Transaction) => Promise<StoredResponse<Body, Status>>,
    ): Promise<StoredResponse<Body, Status>>;
  }
}

export interface IdempotencyOptions {
  /** How long a key and its response are kept; the draft asks for the expiry to be published. */
  retentionHours: number;
  /** Where keys and responses are kept: the API's table, or the admin API's. */
  keys: IdempotencyKeysRepository;
  /** Whose keys a request's are (its API key's, or its admin token's): one caller's never meet another's. */
  ownerOf: (request: FastifyRequest) => number | undefined;
}

/**
 * The documentation of an operation whose config says `idempotent`, on either listener: the
 * header, its replay, and the two ways a key is refused.
 */
export function documentIdempotency(headers: TSchema | undefined, responses: ResponseSchemas, retentionHours: number) {
  const succeeded = Object.fromEntries(Object.entries(responses).filter(([status]) => status.startsWith('2')));
  return {
    headers: withRequestHeaders(headers, {
      'idempotency-key': {
        ...IdempotencyKey,
        description: `${IdempotencyKey.description} Keys are kept for ${retentionHours} hours, then forgotten.`,
      },
    }),
    responses: {
      ...responses,
      ...withHeaders(succeeded, {
        'idempotent-replayed': {
          type: 'string',
          description: '`true` when this is the stored response of an earlier request with the same Idempotency-Key',
        },
      }),
      409: {
        ...ErrorBody,
        description: 'A request with this Idempotency-Key is still in progress (`idempotency_key_in_use`); retry after Retry-After',
        headers: RETRY_AFTER_HEADERS,
      },
      422: {
        ...ErrorBody,
        description: 'This Idempotency-Key was used with a different request: another body, or another target (`idempotency_key_mismatch`)',
      },
    },
  };
}

const PURGE_EVERY_MS = MINUTE_MS;
const IN_USE_RETRY_SECONDS = 1;

/**
 * A digest of what makes two requests the same: the operation, its target and the body as
 * validated, with unknown fields (ignored by the operation) left out and keys in a fixed order
 * (safe-stable-stringify, already pino's), so a retry that formats its JSON differently is still
 * the same request, and the same key sent for another customer or key is not.
 */
function requestHash(request: FastifyRequest): string {
  const body = declaredPart(request.routeOptions.schema?.body as TSchema | undefined, request.body);
  return hash('sha256', `${request.method} ${targetOf(request)} ${stringify(body) ?? 'null'}`, 'base64url');
}

/**
 * The route's path with its parameters as validated written in (`/admin/v1/customers/7/credits`),
 * escaped so that no value can pass for another's segments: one target however the URL wrote it.
 * A route without parameters is its pattern, the digest's part before targets counted, so the keys
 * of such routes stored before still replay (decisions/idempotency-key.md).
 */
function targetOf(request: FastifyRequest): string {
  const params = request.params as Record<string, unknown>;
  return request.routeOptions.url!.replace(/:(\w+)/g, (_, name: string) => encodeURIComponent(String(params[name])));
}

/**
 * What the schema declares of a validated value, never looking into undeclared fields: they may
 * nest as deep as the body limit allows, and walking them would overflow the stack.
 */
function declaredPart(schema: TSchema | undefined, value: unknown): unknown {
  if (schema?.type === 'object' && typeof value === 'object' && value !== null && !Array.isArray(value)) {
    const properties = (schema.properties ?? {}) as Record<string, TSchema>;
    const fields = value as Record<string, unknown>;
    return Object.fromEntries(
      Object.keys(properties)
        .filter((name) => name in fields)
        .map((name) => [name, declaredPart(properties[name], fields[name])]),
    );
  }
  if (schema?.type === 'array' && Array.isArray(value)) return value.map((item) => declaredPart(schema.items as TSchema, item));
  return value;
}

/**
 * Idempotency-Key on the routes whose config says `idempotent` (draft-ietf-httpapi-idempotency-
 * key-header-07, and Stripe's rules where the draft is open), under /v1 per API key and on the
 * admin listener per admin token. Both listeners' route contracts document the header, 409 and
 * 422 through documentIdempotency.
 */
export default fp<IdempotencyOptions>(
  async function idempotency(app, { retentionHours, keys, ownerOf }) {
    // One purge at a time per instance; closing waits for it, so it never outlives the database.
    let purging: Promise<void> | undefined;
    const purge = () => {
      purging ??= keys
        .purge(retentionHours)
        .then(
          (purged) => {
            if (purged > 0) app.log.info({ purged }, 'idempotency keys purged');
          },
          (error: unknown) => app.log.warn({ err: error }, 'idempotency keys: purge failed; trying again in a minute'),
        )
        .finally(() => (purging = undefined));
    };
    const purger = setInterval(purge, PURGE_EVERY_MS).unref();
    app.addHook('onReady', async () => purge());
    app.addHook('onClose', async () => {
      clearInterval(purger);
      await purging;
    });

    app.decorate('idempotently', async function idempotently<
      Body,
      Status extends number,
    >(request: FastifyRequest, reply: FastifyReply, work: (tx?: Transaction) => Promise<StoredResponse<Body, Status>>) {
      const header = request.headers['idempotency-key'];
      const ownerId = ownerOf(request);
      if (typeof header !== 'string' || ownerId === undefined) return work();
      const claim = { ownerId, key: idempotencyKeyOf(header), requestHash: requestHash(request) };
      // What was stored came from this route's own work, so it has the work's type.
      const outcome = (await keys.once(claim, work)) as IdempotentOutcome<StoredResponse<Body, Status>>;
      switch (outcome.kind) {
        case 'first':
          return outcome.response;
        case 'replay':
          reply.header('idempotent-replayed', 'true');
          return outcome.response;
        case 'in-use':
          throw errors.idempotencyKeyInUse(IN_USE_RETRY_SECONDS);
        case 'mismatch':
          throw errors.idempotencyKeyMismatch();
      }
    });
  },
  { name: 'idempotency' },
);
