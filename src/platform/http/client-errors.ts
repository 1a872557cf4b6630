import { randomUUID } from 'node:crypto';
import { STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { errorBody, errors, frameworkError, sendApiError } from '../errors.js';
import { REQUEST_ID_HEADER } from './request-id.js';
import { SECURITY_HEADERS } from './security-headers.js';

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
  const refusal = frameworkError(error.code) ?? errors.malformedRequest();
  const status = refusal.statusCode;
  const body = JSON.stringify(errorBody(refusal));
  // No request exists, so nothing was logged under this id; it is there because every response has one.
  const headers = Object.entries({ ...refusal.headers, ...SECURITY_HEADERS, [REQUEST_ID_HEADER]: randomUUID() }).map(
    ([name, value]) => `${name}: ${value}\r\n`,
  );
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nConnection: close\r\nContent-Type: application/json; charset=utf-8\r\n` +
      `${headers.join('')}Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
  setTimeout(() => socket.destroy(), 1_000).unref();
}

/**
 * What the router refuses before any route or hook (a request target that is no path at all,
 * such as `*` or `http:x`): answered as an Error, never with the framework's own body, which
 * would echo the URL. Malformed paths and long parameters do not get here (see app.ts).
 */
export function frameworkErrors(_error: FastifyError, request: FastifyRequest, reply: FastifyReply) {
  sendApiError(reply.headers(SECURITY_HEADERS).header(REQUEST_ID_HEADER, request.id), errors.targetNotPath());
}
