import { isUtf8 } from 'node:buffer';
import type { FastifyInstance } from 'fastify';
import type { SettingValues } from '../config/parsers.js';
import type { connections } from '../config/settings/http.js';
import { errors, isPath, sendApiError } from '../errors.js';
import { formatValidationError, validatorCompiler } from '../validation.js';
import { clientErrorHandler, frameworkErrors } from './client-errors.js';
import { escapeMalformedPath } from './malformed-url.js';
import { REQUEST_ID_HEADER } from './request-id.js';
import { RequestLog, type RequestLogCaller } from './request-log.js';
import { SECURITY_HEADERS } from './security-headers.js';
import { closeIfBodyUnread } from './unread-body.js';

/**
 * Fastify's options that every JSON listener of the service shares (the API and the admin API):
 * the request log line (naming the caller as `caller` reads it), deadlines for slow or stalled clients (slowloris: headers, the whole
 * request, and a socket that sends or reads nothing, checked every second), and the Error
 * contract down to requests, URLs and bodies Node or the router cannot take.
 */
export const listenerOptions = (config: SettingValues<typeof connections>, caller: RequestLogCaller) => ({
  logController: new RequestLog(caller),
  http: {
    headersTimeout: Math.min(config.HEADERS_TIMEOUT_MS, config.REQUEST_TIMEOUT_MS),
    connectionsCheckingInterval: 1_000,
  },
  requestTimeout: config.REQUEST_TIMEOUT_MS,
  connectionTimeout: config.IDLE_TIMEOUT_MS,
  clientErrorHandler,
  rewriteUrl: escapeMalformedPath,
  frameworkErrors,
  schemaErrorFormatter: formatValidationError,
});

/**
 * What such a listener does on every request: security headers and the request id on every
 * response, a target that is no path refused before any route, a response sent before the body was read closes the connection, and JSON (TypeBox
 * validated) is the only media type read: anything else is a 415. JSON is UTF-8 (RFC 8259): a
 * body that is not is a 400, where decoding it leniently would store U+FFFD in place of what was
 * sent. An empty body is a 400 only where the operation needs one.
 */
export function serveJson(listener: FastifyInstance) {
  // Callback hooks: they run on every request, and need no promise.
  listener.addHook('onRequest', (request, reply, done) => {
    reply.headers(SECURITY_HEADERS).header(REQUEST_ID_HEADER, request.id);
    if (isPath(request.url)) return done();
    sendApiError(reply, errors.targetNotPath());
  });
  listener.addHook('onSend', closeIfBodyUnread);
  listener.setValidatorCompiler(validatorCompiler);
  listener.removeContentTypeParser('text/plain');
  const parseJson = listener.getDefaultJsonParser('error', 'error');
  listener.removeContentTypeParser('application/json');
  listener.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body: Buffer, done) => {
    // Clients that set the JSON media type on every request send it on a revoke too: an empty body
    // is no body where the operation needs none (Fastify's parser would refuse it).
    if (body.length === 0 && mayOmitBody(request.routeOptions.schema)) return done(null, undefined);
    if (!isUtf8(body)) return done(errors.bodyNotUtf8(), undefined);
    // Fastify's own parser (a callback, no promise): empty bodies and prototype poisoning as before.
    void parseJson(request, body.toString(), done);
  });
}

/** Whether an operation's schema lets its body be left out: it declares none, or requires none of its fields (a rotation's). */
const mayOmitBody = (schema: { body?: unknown } | undefined) => !(schema?.body as { required?: string[] } | undefined)?.required?.length;
