import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ErrorCode } from './schemas/error.js';

/** An error whose status, code and message are safe to show to the client as they are. */
export class ApiError extends Error {
  constructor(
    readonly statusCode: number,
    readonly code: ErrorCode,
    message: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

/** Whole seconds a client is told to wait (Retry-After): at least 1. */
export const secondsUntil = (ms: number) => Math.max(1, Math.ceil(ms / 1000));

const retryAfter = (seconds: number) => ({ 'retry-after': String(seconds) });

const REALM = 'Bearer realm="pets"';
const ADMIN_REALM = 'Bearer realm="pets-admin"';

/** How long a client is asked to wait when the service cannot answer for now. */
export const UNAVAILABLE_RETRY_SECONDS = 5;

/** Every error the API answers, defined once: call sites name the error, never its status and code. */
export const errors = {
  badRequest: (message: string) => new ApiError(400, 'bad_request', message),
  bodyNotUtf8: () => new ApiError(400, 'bad_request', 'Request body is not valid UTF-8'),
  credentialsMissing: () =>
    new ApiError(401, 'unauthorized', 'Authentication required: send Authorization: Bearer <API key>', { 'www-authenticate': REALM }),
  credentialsInvalid: () =>
    new ApiError(401, 'unauthorized', 'The API key is invalid, revoked or expired', {
      'www-authenticate': `${REALM}, error="invalid_token"`,
    }),
  readOnlyKey: () => new ApiError(403, 'forbidden', 'This API key is read-only; use a key with write access to change data'),
  adminTokenMissing: () =>
    new ApiError(401, 'unauthorized', 'Authentication required: send Authorization: Bearer <admin token>', {
      'www-authenticate': ADMIN_REALM,
    }),
  adminTokenInvalid: () =>
    new ApiError(401, 'unauthorized', 'The admin token is invalid or revoked', {
      'www-authenticate': `${ADMIN_REALM}, error="invalid_token"`,
    }),
  readOnlyAdminToken: () =>
    new ApiError(403, 'forbidden', 'This admin token has the read scope; changing keys needs a token with the write scope', {
      'www-authenticate': `${ADMIN_REALM}, error="insufficient_scope", scope="write"`,
    }),
  notFound: (message: string) => new ApiError(404, 'not_found', message),
  methodNotAllowed: (allow: string[]) =>
    new ApiError(405, 'method_not_allowed', `Only ${allow.join(', ')} are supported on this path`, { allow: allow.join(', ') }),
  idempotencyKeyInUse: (retryAfterSeconds: number) =>
    new ApiError(
      409,
      'idempotency_key_in_use',
      'A request with this Idempotency-Key is still in progress; retry after the Retry-After delay',
      retryAfter(retryAfterSeconds),
    ),
  /** What the state of the thing does not allow (changing a revoked key). */
  conflict: (message: string) => new ApiError(409, 'conflict', message),
  gone: (sunset: string, successor: string) => new ApiError(410, 'gone', `This operation was removed on ${sunset}; use ${successor}`),
  idempotencyKeyMismatch: () =>
    new ApiError(
      422,
      'idempotency_key_mismatch',
      'This Idempotency-Key was already used with a different request body; send a new key for a new request',
    ),
  rateLimited: (limit: number, window: 'minute' | 'day', retryAfterSeconds: number) =>
    new ApiError(
      429,
      'rate_limited',
      `Rate limit of ${limit} requests per ${window} exceeded; retry after the Retry-After delay`,
      retryAfter(retryAfterSeconds),
    ),
  tooManyUnknownKeys: (retryAfterSeconds: number) =>
    new ApiError(
      429,
      'rate_limited',
      'Too many unknown API keys from this address; retry after the Retry-After delay',
      retryAfter(retryAfterSeconds),
    ),
  banned: (until: string, retryAfterSeconds: number) =>
    new ApiError(429, 'api_key_banned', `Too many requests after being rate limited; banned until ${until}`, retryAfter(retryAfterSeconds)),
  /** The message of every 5xx ends with the request id to quote (sendError adds it). */
  internal: () => new ApiError(500, 'internal_error', 'Internal server error'),
  /** 503 with Retry-After: overloaded, shutting down, or the database unreachable. */
  unavailable: (message: string) => new ApiError(503, 'service_unavailable', message, retryAfter(UNAVAILABLE_RETRY_SECONDS)),
};

/**
 * Answers with an Error body; every non-2xx response of the service is written here. A 5xx
 * message ends with the request id (also in X-Request-Id and in the request's log line), so a
 * client reporting a fault quotes what finds it in the logs.
 */
export function sendError(reply: FastifyReply, status: number, code: ErrorCode, message: string) {
  const quoted = status >= 500 ? `${message} (request id ${reply.request.id})` : message;
  return reply.code(status).type('application/json; charset=utf-8').send({ code, message: quoted, status });
}

/** Answers with an ApiError: its headers, status and Error body. */
export const sendApiError = (reply: FastifyReply, error: ApiError) =>
  sendError(reply.headers(error.headers), error.statusCode, error.code, error.message);

/** The most of anything a client sent that an error message repeats: enough to recognise it, never a megaphone. */
const MAX_QUOTED_LENGTH = 100;

/** Client text as an error message may repeat it: cut to MAX_QUOTED_LENGTH characters. */
export const quote = (text: string) => (text.length > MAX_QUOTED_LENGTH ? `${text.slice(0, MAX_QUOTED_LENGTH)}…` : text);

export const notFoundHandler = (request: FastifyRequest, reply: FastifyReply) =>
  sendApiError(reply, errors.notFound(`No route for ${request.method} ${quote(request.url.split('?')[0]!)}`));
