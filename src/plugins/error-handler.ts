import fp from 'fastify-plugin';
import { STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { DatabaseUnavailableError } from '../db/database.js';
import { ApiError } from '../errors.js';
import type { ErrorCode } from '../schemas/error.js';

/** Fastify's own client errors, by code, as our stable codes and messages. */
const FRAMEWORK_ERRORS: Record<string, [number, ErrorCode, string]> = {
  FST_ERR_CTP_INVALID_MEDIA_TYPE: [415, 'unsupported_media_type', 'Content-Type must be application/json'],
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: [400, 'bad_request', 'Content-Length does not match the body'],
  FST_ERR_CTP_BODY_TOO_LARGE: [413, 'payload_too_large', 'Request body is larger than the limit'],
  FST_ERR_CTP_EMPTY_JSON_BODY: [400, 'bad_request', 'Request body is empty; a JSON object is required'],
  FST_ERR_CTP_INVALID_JSON_BODY: [400, 'bad_request', 'Request body is not valid JSON'],
  FST_ERR_CTP_INVALID_TYPE: [400, 'bad_request', 'Content-Type is malformed'],
};

const CODE_BY_STATUS: Record<number, ErrorCode> = {
  400: 'bad_request',
  401: 'unauthorized',
  404: 'not_found',
  405: 'method_not_allowed',
  410: 'gone',
  413: 'payload_too_large',
  415: 'unsupported_media_type',
  429: 'rate_limited',
  503: 'service_unavailable',
};

/**
 * Requests Node cannot even parse (oversized headers, malformed request lines, a header timeout)
 * never reach a route; they get the same Error body on a raw socket, and the connection closes.
 */
export function clientErrorHandler(error: Error & { code?: string }, socket: Duplex) {
  // A client with output still queued is not reading: an answer would never leave, so waiting
  // to flush it would keep the connection open for ever.
  if (error.code === 'ECONNRESET' || !socket.writable || socket.writableLength > 0) {
    socket.destroy();
    return;
  }
  const [status, code, message]: [number, ErrorCode, string] =
    error.code === 'HPE_HEADER_OVERFLOW'
      ? [431, 'headers_too_large', 'Request headers are larger than the limit (16 KiB)']
      : error.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? [408, 'request_timeout', 'The request took too long to arrive']
        : [400, 'bad_request', 'Malformed HTTP request'];
  const body = JSON.stringify({ code, message, status });
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nConnection: close\r\nContent-Type: application/json; charset=utf-8\r\n` +
      `X-Content-Type-Options: nosniff\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
  setTimeout(() => socket.destroy(), 1_000).unref();
}

export const notFoundHandler = (request: FastifyRequest, reply: FastifyReply) =>
  sendError(reply, 404, 'not_found', `No route for ${request.method} ${request.url.split('?')[0]}`);

export function sendError(reply: FastifyReply, status: number, code: ErrorCode, message: string) {
  return reply.code(status).type('application/json; charset=utf-8').send({ code, message, status });
}

/**
 * Every error and every unknown route becomes an Error body. Client errors say what was wrong;
 * anything unexpected is logged with the request id and answered without its details.
 */
export default fp(
  async function errorHandler(app) {
    app.setErrorHandler((error: FastifyError, request, reply) => {
      if (error instanceof ApiError) {
        return sendError(reply.headers(error.headers), error.statusCode, error.code, error.message);
      }
      if (error instanceof DatabaseUnavailableError) {
        request.log.warn({ err: error.cause }, 'database unavailable');
        return sendError(reply.header('retry-after', '5'), 503, 'service_unavailable', 'The database is unreachable; retry later');
      }
      if (error.validation) {
        return sendError(reply, 400, 'bad_request', error.message);
      }
      const known = FRAMEWORK_ERRORS[error.code];
      if (known) return sendError(reply, ...known);
      if (error.name === 'SyntaxError' && error.statusCode === 400) {
        return sendError(reply, 400, 'bad_request', 'Request body is not valid JSON');
      }
      const status = error.statusCode ?? 500;
      const code = CODE_BY_STATUS[status];
      if (status < 500 && code) return sendError(reply, status, code, error.message);

      request.log.error({ err: error }, 'request failed');
      return sendError(reply, 500, 'internal_error', `Internal server error; quote request id ${request.id}`);
    });

    app.setNotFoundHandler(notFoundHandler);
  },
  { name: 'error-handler' },
);
