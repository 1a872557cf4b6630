import { STATUS_CODES } from 'node:http';
import fp from 'fastify-plugin';
import type { FastifyError } from 'fastify';
import { DatabaseUnavailableError } from '../db/database.js';
import { ApiError, errors, notFoundHandler, sendApiError, sendError } from '../errors.js';
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
  403: 'forbidden',
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
        return sendApiError(reply, error);
      }
      if (error instanceof DatabaseUnavailableError) {
        request.log.warn({ err: error.cause }, 'database unavailable');
        return sendApiError(reply, errors.unavailable('The database is unreachable; retry later'));
      }
      if (error.validation) {
        return sendError(reply, 400, 'bad_request', error.message);
      }
      const known = FRAMEWORK_ERRORS[error.code];
      if (known) return sendError(reply, ...known);
      if (error.name === 'SyntaxError' && error.statusCode === 400) {
        return sendError(reply, 400, 'bad_request', 'Request body is not valid JSON');
      }
      // A client error keeps its status (a static file refused is a 403, never a 500), with our code
      // and the status's own words: its message may quote the request or name a file.
      const status = error.statusCode ?? 500;
      if (status >= 400 && status < 500) return sendError(reply, status, CODE_BY_STATUS[status] ?? 'bad_request', STATUS_CODES[status]!);

      request.log.error({ err: error }, 'unexpected error');
      return sendApiError(reply, errors.internal());
    });

    app.setNotFoundHandler(notFoundHandler);
  },
  { name: 'error-handler' },
);
