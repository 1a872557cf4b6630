import type { ServiceErrorCode } from './types.js';

/**
 * Codes the client gives failures that carry no answer of the service's: `timeout` (no answer
 * within `timeoutMs`, on the last attempt), `network_error` (the connection failed),
 * `unexpected_response` (an answer that is not the service's JSON), and `rate_limited` also when
 * the client refuses to wait longer than `maxWaitMs` for the key's limit to reset.
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

/** Every failure of a call, except an abort through the caller's own signal (which rejects with the signal's reason). */
export class PetStoreError extends Error {
  override readonly name = 'PetStoreError';
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
