import fp from 'fastify-plugin';
import { hash } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { TSchema } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import type { Transaction } from '../db/database.js';
import { ApiError } from '../errors.js';
import { createIdempotencyKeysRepository, type IdempotentOutcome, type StoredResponse } from '../repositories/idempotency-keys.js';
import { ErrorBody } from '../schemas/error.js';
import { IdempotencyKey, idempotencyKeyOf } from '../schemas/headers.js';
import { withHeaders, withRequestHeaders, type ResponseSchemas } from '../schemas/responses.js';

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
}

const PURGE_EVERY_MS = 60_000;
const IN_USE_RETRY_SECONDS = '1';

/**
 * A digest of what makes two requests the same: the operation and the body as validated, with
 * unknown fields (ignored by the operation) left out and keys in a fixed order, so a retry that
 * formats its JSON differently is still the same request.
 */
function requestHash(request: FastifyRequest): string {
  const bodySchema = request.routeOptions.schema?.body as TSchema | undefined;
  const body = bodySchema ? Value.Clean(bodySchema, Value.Clone(request.body)) : request.body;
  return hash('sha256', `${request.method} ${request.routeOptions.url} ${canonicalJson(body)}`, 'base64url');
}

function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (typeof value === 'object' && value !== null) {
    const entries = Object.entries(value).sort(([a], [b]) => (a < b ? -1 : 1));
    return `{${entries.map(([key, item]) => `${JSON.stringify(key)}:${canonicalJson(item)}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

/**
 * Idempotency-Key on the routes whose config says `idempotent` (draft-ietf-httpapi-idempotency-
 * key-header-07, and Stripe's rules where the draft is open). Registered before rate limiting and
 * deprecation, so that the responses it documents get their headers documented too.
 */
export default fp<IdempotencyOptions>(
  async function idempotency(app, { retentionHours }) {
    const keys = createIdempotencyKeysRepository(app.db);

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

    app.addHook('onRoute', (route) => {
      if (!route.config?.idempotent || !route.schema) return;
      route.schema.headers = withRequestHeaders(route.schema.headers as TSchema | undefined, {
        'idempotency-key': {
          ...IdempotencyKey,
          description: `${IdempotencyKey.description} Keys are kept for ${retentionHours} hours, then forgotten.`,
        },
      });
      const responses = route.schema.response as ResponseSchemas;
      const succeeded = Object.fromEntries(Object.entries(responses).filter(([status]) => status.startsWith('2')));
      route.schema.response = {
        ...responses,
        ...withHeaders(succeeded, {
          'idempotent-replayed': { type: 'string', description: '`true` when this is the stored response of an earlier request with the same Idempotency-Key' },
        }),
        409: {
          ...ErrorBody,
          description: 'A request with this Idempotency-Key is still in progress (`idempotency_key_in_use`); retry after Retry-After',
          headers: { 'retry-after': { type: 'integer', description: 'Seconds to wait before retrying' } },
        },
        422: { ...ErrorBody, description: 'This Idempotency-Key was used with a different request body (`idempotency_key_mismatch`)' },
      };
    });

    app.decorate('idempotently', async function idempotently<Body, Status extends number>(
      request: FastifyRequest,
      reply: FastifyReply,
      work: (tx?: Transaction) => Promise<StoredResponse<Body, Status>>,
    ) {
      const header = request.headers['idempotency-key'];
      if (typeof header !== 'string' || !request.apiKey) return work();
      const claim = { apiKeyId: request.apiKey.id, key: idempotencyKeyOf(header), requestHash: requestHash(request) };
      // What was stored came from this route's own work, so it has the work's type.
      const outcome = (await keys.once(claim, work)) as IdempotentOutcome<StoredResponse<Body, Status>>;
      switch (outcome.kind) {
        case 'first':
          return outcome.response;
        case 'replay':
          reply.header('idempotent-replayed', 'true');
          return outcome.response;
        case 'in-use':
          throw new ApiError(409, 'idempotency_key_in_use', 'A request with this Idempotency-Key is still in progress; retry after the Retry-After delay', {
            'retry-after': IN_USE_RETRY_SECONDS,
          });
        case 'mismatch':
          throw new ApiError(
            422,
            'idempotency_key_mismatch',
            'This Idempotency-Key was already used with a different request body; send a new key for a new request',
          );
      }
    });
  },
  { name: 'idempotency', dependencies: ['database', 'auth'] },
);
