import { Type, type TSchema } from '@sinclair/typebox';
import type { RouteOptions } from 'fastify';
import { RETRY_AFTER_HEADERS, SERVICE_FAILURE_RESPONSES } from '../platform/errors.js';
import { SECURITY_SCHEME } from '../auth/plugin.js';
import { CACHING_HEADERS, readsOnly } from '../platform/http/conditional-requests.js';
import { DEPRECATION_HEADERS } from './deprecation.js';
import { documentIdempotency } from '../idempotency/plugin.js';
import { RATE_LIMIT_HEADERS } from '../rate-limit/headers.js';
import { REQUEST_ID_RESPONSE_HEADERS } from '../platform/http/request-id.js';
import { ErrorBody } from '../platform/schemas/error.js';
import { IfNoneMatch } from '../platform/schemas/headers.js';
import { withHeaders, withRequestHeaders, type ResponseSchemas } from '../platform/schemas/responses.js';

/**
 * Everything the pipeline under /v1 adds to what an operation declares (pets/routes.ts): with
 * that file, this one tells every status and header each operation can answer. Applied to each
 * route as it is declared, in the order the concerns act, so that each concern's headers are
 * documented on the responses the ones before it add.
 */
export function documentOperation(route: RouteOptions, { idempotencyKeyRetentionHours }: { idempotencyKeyRetentionHours: number }) {
  const schema = route.schema;
  if (!schema || schema.hide) return;
  const config = route.config ?? {};
  let responses = schema.response as ResponseSchemas;
  let headers = schema.headers as TSchema | undefined;

  // Authentication: a bearer key, unless public; read-only keys may not write, browser keys answer only their origins,
  // and no key may call what costs more than its windows hold.
  if (!config.public) {
    schema.security = [{ [SECURITY_SCHEME]: [] }];
    responses = {
      ...responses,
      401: {
        ...ErrorBody,
        description: 'API key missing, invalid, revoked or expired',
        headers: { 'www-authenticate': { type: 'string', description: 'Bearer realm="pets" (RFC 6750)' } },
      },
    };
    const cost = config.cost ?? 1;
    const refusals = [
      config.writes && 'The API key is read-only (`forbidden`)',
      'The API key is bound to web origins (a browser key) and the request’s Origin is missing or not one of them (`origin_not_allowed`)',
      cost > 1 &&
        `The operation costs ${cost} units, more than a window of the API key holds (\`cost_exceeds_limit\`): no wait lets it through, so no Retry-After`,
    ].filter((refusal) => typeof refusal === 'string');
    responses = { ...responses, 403: { ...ErrorBody, description: refusals.join('. ') } };
  }

  // Safe retries: the Idempotency-Key, its replay, and the two ways a key is refused.
  if (config.idempotent) ({ headers, responses } = documentIdempotency(headers, responses, idempotencyKeyRetentionHours));

  // Conditional reads: ETag on the 200, and a 304 with every header of the 200 (RFC 9110 15.4.5), no body.
  if (readsOnly(route.method)) {
    headers = withRequestHeaders(headers, { 'if-none-match': IfNoneMatch });
    responses = {
      ...responses,
      ...withHeaders({ 200: responses[200]! }, CACHING_HEADERS),
      304: {
        ...Type.Null({
          description:
            "Not Modified: the ETag matched If-None-Match; the client's copy is current. No body; not counted against the rate limit when it matched a tag the client sent",
        }),
        headers: { ...responses[200]!.headers, ...CACHING_HEADERS },
      },
    };
  }

  // Rate limiting: the headers on every response (a 503 of load shedding too), and the 429.
  responses = withHeaders(
    {
      ...responses,
      ...SERVICE_FAILURE_RESPONSES,
      429: {
        ...ErrorBody,
        description:
          'Rate limit exceeded (`rate_limited`), too many requests of the key in flight at once (`concurrency_limited`, costing nothing), fewer prepaid credits left to the key or its customer than the operation costs (`credits_exhausted`, costing nothing; Retry-After until their refill, absent without one), or the caller is banned for a while (`api_key_banned`)',
        headers: RETRY_AFTER_HEADERS,
      },
    },
    RATE_LIMIT_HEADERS,
  );

  // Deprecation: its headers on every response (the 410 after the sunset is the operation's own).
  if (config.deprecation) responses = withHeaders(responses, DEPRECATION_HEADERS);

  // The request id, on every response of the service (app.ts).
  responses = withHeaders(responses, REQUEST_ID_RESPONSE_HEADERS);

  schema.response = responses;
  if (headers) schema.headers = headers;
}
