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

export const badRequest = (message: string) => new ApiError(400, 'bad_request', message);
export const notFound = (message: string) => new ApiError(404, 'not_found', message);
