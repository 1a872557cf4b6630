import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import proxyAddr from '@fastify/proxy-addr';

/** The header that carries a request's id, both ways. */
export const REQUEST_ID_HEADER = 'x-request-id';

/** On every response of both listeners (documented by each listener's contract). */
export const REQUEST_ID_RESPONSE_HEADERS = {
  [REQUEST_ID_HEADER]: {
    type: 'string',
    description:
      "This request's id, as logged and as quoted in every 5xx message: the `X-Request-Id` a trusted proxy sent " +
      '(1 to 128 characters of `A-Z a-z 0-9 . _ : -`), else a new UUID',
  },
} as const;

/**
 * An id a proxy may hand on: 1 to 128 characters of letters, digits and `._:-`. That admits
 * UUIDs, nginx's `$request_id` (32 hex digits), AWS's `Root=1-...` trace ids without the `=`,
 * and anything else a log search handles without quoting; it excludes spaces, commas (two headers
 * joined), quotes and control characters, so an id can never forge or break a log line or header.
 */
const WELL_FORMED_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/**
 * Fastify's genReqId: the X-Request-Id a trusted proxy sent, when it is well-formed, else a new
 * UUID. It runs on the raw request, before Fastify applies trustProxy to request.ip, so the trust
 * is decided here the same way (proxy-addr's compiled list, as Fastify compiles TRUST_PROXY): on
 * the address of the connection itself, never on anything a client wrote. Clients that reach the
 * service directly cannot choose their id, so ids stay unique per instance and unforgeable.
 */
export function requestIdGenerator(trustedProxies: string[]): (request: IncomingMessage) => string {
  const trusted = trustedProxies.length > 0 ? proxyAddr.compile(trustedProxies) : () => false;
  return (request) => {
    const sent = request.headers[REQUEST_ID_HEADER];
    const peer = request.socket?.remoteAddress;
    if (typeof sent === 'string' && WELL_FORMED_REQUEST_ID.test(sent) && peer !== undefined && trusted(peer, 0)) return sent;
    return randomUUID();
  };
}
