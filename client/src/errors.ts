import type { ServiceErrorCode } from './types.js';

/**
 * Codes the client gives failures that carry no answer of the service's: `timeout` (no answer
 * within `timeoutMs`, on the last attempt), `network_error` (the connection failed),
 * `unexpected_response` (an answer that is not the service's JSON, or a next-page link the client
 * refuses to follow), and `rate_limited` also when the client refuses to wait longer than
 * `maxWaitMs` for the key's limit to reset.
 */
export type ClientErrorCode = 'timeout' | 'network_error' | 'unexpected_response';

export interface PetStoreErrorDetails {
  status: number;
  code: ServiceErrorCode | ClientErrorCode;
  message: string;
  requestId?: string;
  retryAfter?: number;
  cause?: unknown;
}

/**
 * Every failure of a call, except an abort through the caller's own signal (which rejects with the
 * signal's reason) and a `TypeError` for an option or argument the client refuses before sending.
 * The subclasses below tell the kinds apart by `instanceof`; a status none of them names (410, 413,
 * 415, ...) is a PetStoreError itself.
 */
export class PetStoreError extends Error {
  override readonly name: string = 'PetStoreError';
  /** The HTTP status; 0 when no answer came (timeout, network error). */
  readonly status: number;
  /** The service's error code (docs/api.md lists them), or one of the client's (ClientErrorCode). */
  readonly code: ServiceErrorCode | ClientErrorCode;
  /** The answer's `X-Request-Id`: quote it when reporting a fault. */
  readonly requestId: string | undefined;
  /** Seconds the service (or the client's rate-limit wait) asks to wait before trying again. */
  readonly retryAfter: number | undefined;

  constructor({ status, code, message, requestId, retryAfter, cause }: PetStoreErrorDetails) {
    super(message, cause === undefined ? undefined : { cause });
    this.status = status;
    this.code = code;
    this.requestId = requestId;
    this.retryAfter = retryAfter;
  }
}

/** 400: the request is invalid (a body, query or cursor the service refuses). */
export class BadRequestError extends PetStoreError {
  override readonly name: string = 'BadRequestError';
}
/** 401: no key, or one the service does not accept. */
export class AuthenticationError extends PetStoreError {
  override readonly name: string = 'AuthenticationError';
}
/** 403: the key may not do this. */
export class PermissionDeniedError extends PetStoreError {
  override readonly name: string = 'PermissionDeniedError';
}
/** 404: no such resource. */
export class NotFoundError extends PetStoreError {
  override readonly name: string = 'NotFoundError';
}
/** 409 and 422: the request conflicts with another (an Idempotency-Key in use, or used with another body). */
export class ConflictError extends PetStoreError {
  override readonly name: string = 'ConflictError';
}
/**
 * 429: the key's rate limit, a ban, its credits spent (`credits_exhausted`), or the client's refusal
 * to wait longer than `maxWaitMs`; `code` tells which.
 */
export class RateLimitError extends PetStoreError {
  override readonly name: string = 'RateLimitError';
}
/** 5xx: the service, or a gateway in front of it, failed (after the retries). */
export class ServerError extends PetStoreError {
  override readonly name: string = 'ServerError';
}
/** No answer: the connection failed (after the retries). */
export class ConnectionError extends PetStoreError {
  override readonly name: string = 'ConnectionError';
}
/** No answer within `timeoutMs` (on the last attempt). */
export class TimeoutError extends PetStoreError {
  override readonly name: string = 'TimeoutError';
}

const CLASS_OF_STATUS: Record<number, new (details: PetStoreErrorDetails) => PetStoreError> = {
  400: BadRequestError,
  401: AuthenticationError,
  403: PermissionDeniedError,
  404: NotFoundError,
  409: ConflictError,
  422: ConflictError,
  429: RateLimitError,
};

/** The failure as the class its status (or, without an answer, its code) names. */
export function errorOf(details: PetStoreErrorDetails): PetStoreError {
  if (details.status === 0) return details.code === 'timeout' ? new TimeoutError(details) : new ConnectionError(details);
  const ErrorClass = CLASS_OF_STATUS[details.status] ?? (details.status >= 500 ? ServerError : PetStoreError);
  return new ErrorClass(details);
}
