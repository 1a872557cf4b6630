import fp from 'fastify-plugin';
import type { FastifyError } from 'fastify';
import { apiAnswerOf } from '../domain-errors.js';
import { ApiError, errors, frameworkError, notFoundHandler, sendApiError } from '../errors.js';

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
      const domain = apiAnswerOf(error);
      if (domain) {
        if (domain.warn) request.log.warn({ err: error.cause }, domain.warn);
        return sendApiError(reply, domain.error);
      }
      if (error.validation) {
        return sendApiError(reply, errors.badRequest(error.message));
      }
      const known = frameworkError(error.code);
      if (known) return sendApiError(reply, known);
      if (error.name === 'SyntaxError' && error.statusCode === 400) {
        return sendApiError(reply, errors.bodyNotJson());
      }
      // A client error keeps its status (a static file refused is a 403, never a 500).
      const status = error.statusCode ?? 500;
      if (status >= 400 && status < 500) return sendApiError(reply, errors.clientError(status));

      request.log.error({ err: error }, 'unexpected error');
      return sendApiError(reply, errors.internal());
    });

    app.setNotFoundHandler(notFoundHandler);
  },
  { name: 'error-handler' },
);
