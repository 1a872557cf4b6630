import fastifyCors from '@fastify/cors';
import type { FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import type { CorsOrigins } from '../config/parsers.js';
import { HTTP_METHODS } from './method-not-allowed.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** @fastify/cors's own per-route options: here, the methods a preflight of the path names. */
    cors?: { methods: string[] };
  }
}

export interface CorsOptions {
  /** CORS_ORIGINS, `off` aside: any origin, or these. */
  origins: Exclude<CorsOrigins, 'off'>;
  /** Every response header the listener documents, read once its routes are all declared: what a page may read. */
  documentedHeaders: () => string[];
}

/**
 * What a page may send beyond the CORS-safelisted headers: the credential, JSON bodies, the
 * documented request headers (retries, conditional reads) and W3C trace context; User-Agent
 * because the official client sets it and browsers other than Chromium send it.
 */
const ALLOWED_REQUEST_HEADERS = [
  'Authorization',
  'Content-Type',
  'Idempotency-Key',
  'If-None-Match',
  'If-Match',
  'traceparent',
  'tracestate',
  'User-Agent',
];

/** Chromium's ceiling for caching a preflight (Firefox allows a day): one preflight per URL every two hours. */
const PREFLIGHT_MAX_AGE_SECONDS = 7200;

/** A CORS preflight: what a browser asks before a call it may not make unasked. */
export const isPreflight = (request: FastifyRequest) =>
  request.method === 'OPTIONS' && request.headers.origin !== undefined && request.headers['access-control-request-method'] !== undefined;

/**
 * Cross-origin calls from web pages (@fastify/cors, decisions/browser-callers.md). Registered ahead
 * of every other onRequest hook that can answer (shutdown, load shedding, the API's authentication
 * and limits), so that a preflight is answered before any of them and costs nothing, and every
 * other answer to a page of an allowed origin, an error of any status included, carries
 * Access-Control-Allow-Origin. A request without `Origin` is no browser's cross-origin call: it gets
 * no CORS header but `Vary: Origin`, and servers calling the API send no bytes for browsers.
 */
export default fp<CorsOptions>(
  async function cors(app, { origins, documentedHeaders }) {
    // Filled once every route is declared, joined once: @fastify/cors joins the array on each answer.
    const exposedHeaders: string[] = [];

    await app.register(fastifyCors, {
      origin: (origin, answer) => answer(null, origin === undefined ? false : origins),
      // A path that declares its methods (refuseOtherMethods) names its own; any other, every method, so that
      // a call to a path that is not there is a 404 the page can read rather than a failed preflight.
      methods: HTTP_METHODS,
      allowedHeaders: ALLOWED_REQUEST_HEADERS,
      exposedHeaders,
      maxAge: PREFLIGHT_MAX_AGE_SECONDS,
      // An OPTIONS with Origin but no Access-Control-Request-Method is answered as a preflight too, not with a text/plain 400.
      strictPreflight: false,
    });

    app.addHook('onReady', async () => {
      exposedHeaders.push(documentedHeaders().join(', '));
    });
  },
  { name: 'cors' },
);
