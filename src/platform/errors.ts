import { STATUS_CODES } from 'node:http';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { ErrorBody, type ErrorCode } from './schemas/error.js';

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

/** Retry-After, as the documented responses that carry it list it. */
export const RETRY_AFTER_HEADERS = { 'retry-after': { type: 'integer', description: 'Seconds to wait before retrying' } } as const;

/** What any operation may answer when the service itself cannot: documented on every operation of both APIs. */
export const SERVICE_FAILURE_RESPONSES = {
  500: {
    ...ErrorBody,
    description: 'A failure inside the service (`internal_error`); the message names the request id to quote, and nothing of the cause',
  },
  503: {
    ...ErrorBody,
    description: 'The service is overloaded, shutting down, or cannot reach its database (`service_unavailable`); retry after Retry-After',
    headers: RETRY_AFTER_HEADERS,
  },
};

const REALM = 'Bearer realm="pets"';
const ADMIN_REALM = 'Bearer realm="pets-admin"';

/** How long a client is asked to wait when the service cannot answer for now. */
const UNAVAILABLE_RETRY_SECONDS = 5;

/** The code of a client error the catalog has no entry for, by its status; any other status is a bad_request. */
const CODE_BY_STATUS: Readonly<Record<number, ErrorCode>> = {
  400: 'bad_request',
  401: 'unauthorized',
  403: 'forbidden',
  404: 'not_found',
  405: 'method_not_allowed',
  410: 'gone',
  413: 'payload_too_large',
  415: 'unsupported_media_type',
  429: 'rate_limited',
};

/**
 * Every error the service answers, on every listener and on the raw socket, defined once: call
 * sites name the error, never its status, code and message.
 */
export const errors = {
  badRequest: (message: string) => new ApiError(400, 'bad_request', message),
  bodyNotUtf8: () => new ApiError(400, 'bad_request', 'Request body is not valid UTF-8'),
  bodyNotJson: () => new ApiError(400, 'bad_request', 'Request body is not valid JSON'),
  bodyEmpty: () => new ApiError(400, 'bad_request', 'Request body is empty; a JSON object is required'),
  contentLengthMismatch: () => new ApiError(400, 'bad_request', 'Content-Length does not match the body'),
  contentTypeMalformed: () => new ApiError(400, 'bad_request', 'Content-Type is malformed'),
  /** What Node cannot parse as an HTTP request at all. */
  malformedRequest: () => new ApiError(400, 'bad_request', 'Malformed HTTP request'),
  /** A request target that is no path (`*`, `https://`, `ftp://host/pets`). */
  targetNotPath: () => new ApiError(400, 'bad_request', 'The request target is not a valid URL path'),
  credentialsMissing: () =>
    new ApiError(401, 'unauthorized', 'Authentication required: send Authorization: Bearer <API key>', { 'www-authenticate': REALM }),
  credentialsInvalid: () =>
    new ApiError(401, 'unauthorized', 'The API key is invalid, revoked or expired', {
      'www-authenticate': `${REALM}, error="invalid_token"`,
    }),
  readOnlyKey: () => new ApiError(403, 'forbidden', 'This API key is read-only; use a key with write access to change data'),
  /** A browser key (its allowedOrigins) used from a page of another origin, or with no Origin at all. */
  originNotAllowed: (origin: string | undefined) =>
    new ApiError(
      403,
      'origin_not_allowed',
      origin === undefined
        ? 'This API key may only be used from the web origins it is bound to, and the request has no Origin'
        : `This API key may not be used from ${origin}: it is bound to other web origins`,
    ),
  /** An operation RATE_LIMIT_COSTS prices above a window of the key: no wait would let it through, so no Retry-After. */
  costExceedsLimit: (cost: number, limit: number, window: string) =>
    new ApiError(
      403,
      'cost_exceeds_limit',
      `This operation costs ${cost} units, more than this API key's limit of ${limit} per ${window}: it is never admitted; ask for higher limits`,
    ),
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
  requestTimeout: () => new ApiError(408, 'request_timeout', 'The request took too long to arrive'),
  payloadTooLarge: () => new ApiError(413, 'payload_too_large', 'Request body is larger than the limit'),
  unsupportedMediaType: () => new ApiError(415, 'unsupported_media_type', 'Content-Type must be application/json'),
  idempotencyKeyMismatch: () =>
    new ApiError(
      422,
      'idempotency_key_mismatch',
      'This Idempotency-Key was already used with a different request (another body or another target); send a new key for a new request',
    ),
  /** `cost` above 1: an operation RATE_LIMIT_COSTS prices, refused with fewer units left than it costs. */
  rateLimited: (limit: number, window: string, retryAfterSeconds: number, { cost = 1, remaining = 0 } = {}) =>
    new ApiError(
      429,
      'rate_limited',
      cost === 1
        ? `Rate limit of ${limit} requests per ${window} exceeded; retry after the Retry-After delay`
        : `Rate limit of ${limit} units per ${window}: this operation costs ${cost} and ${remaining} remain; retry after the Retry-After delay`,
      retryAfter(retryAfterSeconds),
    ),
  tooManyUnknownKeys: (retryAfterSeconds: number) =>
    new ApiError(
      429,
      'rate_limited',
      'Too many unknown API keys from this address; retry after the Retry-After delay',
      retryAfter(retryAfterSeconds),
    ),
  /** `route`: the free operation (of cost 0) whose own limit per key was reached, as `GET /v1/rate_limit`. */
  freeCallsLimited: (route: string, perMinute: number, retryAfterSeconds: number) =>
    new ApiError(
      429,
      'rate_limited',
      `${route} answers ${perMinute} times a minute per API key; retry after the Retry-After delay`,
      retryAfter(retryAfterSeconds),
    ),
  /** `holder`: whose limit it is, the key's or (of a customer's key) its customer's, shared by all its keys. */
  concurrencyLimited: (limit: number, holder = 'This API key') =>
    new ApiError(
      429,
      'concurrency_limited',
      `${holder} already has ${limit} requests in flight, its limit; retry one once another has been answered`,
      retryAfter(1),
    ),
  /** `whose`: "This API key's" or "This API key's customer's"; Retry-After until the balance's refill, absent without one. */
  creditsExhausted: (whose: string, remaining: number, cost: number, retryAfterSeconds: number | undefined) =>
    new ApiError(
      429,
      'credits_exhausted',
      `${whose} prepaid credits are spent: ${remaining} ${remaining === 1 ? 'unit remains' : 'units remain'} and this operation costs ${cost}; ` +
        (retryAfterSeconds === undefined ? 'they must be topped up before it is served' : 'they are refilled after the Retry-After delay'),
      retryAfterSeconds === undefined ? {} : retryAfter(retryAfterSeconds),
    ),
  banned: (until: string, retryAfterSeconds: number) =>
    new ApiError(429, 'api_key_banned', `Too many requests after being rate limited; banned until ${until}`, retryAfter(retryAfterSeconds)),
  headersTooLarge: () => new ApiError(431, 'headers_too_large', 'Request headers are larger than the limit (16 KiB)'),
  /**
   * Any other client error (a 4xx) a library raises: its status, with the status's own words, as
   * its message may quote the request or name a file.
   */
  clientError: (status: number) => new ApiError(status, CODE_BY_STATUS[status] ?? 'bad_request', STATUS_CODES[status]!),
  /** The message of every 5xx ends with the request id to quote (sendApiError adds it). */
  internal: () => new ApiError(500, 'internal_error', 'Internal server error'),
  /** 503 with Retry-After: overloaded, shutting down, or the database unreachable. */
  unavailable: (message: string) => new ApiError(503, 'service_unavailable', message, retryAfter(UNAVAILABLE_RETRY_SECONDS)),
};

/**
 * Fastify's and Node's codes for what a client sent wrong, each as the catalog's error: their own
 * messages may quote the request, so they are never passed on.
 */
const FRAMEWORK_ERRORS = new Map<string, () => ApiError>([
  ['FST_ERR_CTP_INVALID_MEDIA_TYPE', errors.unsupportedMediaType],
  ['FST_ERR_CTP_INVALID_CONTENT_LENGTH', errors.contentLengthMismatch],
  ['FST_ERR_CTP_BODY_TOO_LARGE', errors.payloadTooLarge],
  ['FST_ERR_CTP_EMPTY_JSON_BODY', errors.bodyEmpty],
  ['FST_ERR_CTP_INVALID_JSON_BODY', errors.bodyNotJson],
  ['FST_ERR_CTP_INVALID_TYPE', errors.contentTypeMalformed],
  ['HPE_HEADER_OVERFLOW', errors.headersTooLarge],
  ['ERR_HTTP_REQUEST_TIMEOUT', errors.requestTimeout],
]);

/** The catalog's error for a framework error code; undefined for a code it has none for. */
export const frameworkError = (code: string | undefined) => (code === undefined ? undefined : FRAMEWORK_ERRORS.get(code)?.());

/** The Error body of an error, as it stands (sendApiError adds the request id to a 5xx message). */
export const errorBody = ({ code, message, statusCode }: ApiError): ErrorBody => ({ code, message, status: statusCode });

/**
 * Answers with an ApiError: its headers, status and Error body; every error a listener answers is
 * written here. A 5xx message ends with the request id (also in X-Request-Id and in the request's
 * log line), so a client reporting a fault quotes what finds it in the logs.
 */
export function sendApiError(reply: FastifyReply, error: ApiError) {
  const body = errorBody(error);
  if (error.statusCode >= 500) body.message = `${body.message} (request id ${reply.request.id})`;
  return reply.headers(error.headers).code(error.statusCode).type('application/json; charset=utf-8').send(body);
}

/** The most of anything a client sent that an error message repeats: enough to recognise it, never a megaphone. */
const MAX_QUOTED_LENGTH = 100;

/** Client text as an error message may repeat it: cut to MAX_QUOTED_LENGTH characters. */
export const quote = (text: string) => (text.length > MAX_QUOTED_LENGTH ? `${text.slice(0, MAX_QUOTED_LENGTH)}…` : text);

/**
 * Whether a request target is a path: origin-form (`/pets`) or an http(s) absolute-form
 * (`http://host/pets`). The router takes any other Node lets through (the asterisk-form `*` of
 * `OPTIONS *`, `ftp://host/pets`) as a path, which a catch-all route (CORS's preflight) would
 * match, where it is no path at all: every listener refuses it first (platform/http/listener.ts).
 */
export const isPath = (url: string) => url.startsWith('/') || /^https?:\/\//i.test(url);

export const notFoundHandler = (request: FastifyRequest, reply: FastifyReply) =>
  sendApiError(reply, errors.notFound(`No route for ${request.method} ${quote(request.url.split('?')[0]!)}`));
