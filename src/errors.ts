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

export const badRequest = (message: string) => new ApiError(400, 'bad_request', message);
export const notFound = (message: string) => new ApiError(404, 'not_found', message);

/** Answers with an Error body; every non-2xx response of the service is written here. */
export function sendError(reply: FastifyReply, status: number, code: ErrorCode, message: string) {
  return reply.code(status).type('application/json; charset=utf-8').send({ code, message, status });
}

export const notFoundHandler = (request: FastifyRequest, reply: FastifyReply) =>
  sendError(reply, 404, 'not_found', `No route for ${request.method} ${request.url.split('?')[0]}`);
