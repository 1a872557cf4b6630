import fp from 'fastify-plugin';
import type { FastifyError } from 'fastify';
import { DatabaseUnavailableError } from '../db/database.js';
import { ApiError, notFoundHandler, sendError } from '../errors.js';
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

      request.log.error({ err: error }, 'unexpected error');
      return sendError(reply, 500, 'internal_error', `Internal server error; quote request id ${request.id}`);
    });

    app.setNotFoundHandler(notFoundHandler);
  },
  { name: 'error-handler' },
);
