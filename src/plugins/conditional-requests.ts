import fp from 'fastify-plugin';
import { hash } from 'node:crypto';
import type { TSchema } from '@sinclair/typebox';
import { Type } from '@sinclair/typebox';
import { IfNoneMatch } from '../schemas/headers.js';
import { withHeaders, withRequestHeaders, type ResponseSchemas } from '../schemas/responses.js';

/**
 * A client may keep what it read and must ask again before each use (a 304 is cheap); no shared
 * cache may keep it at all, since the rate-limit headers belong to one API key.
 */
export const REVALIDATE = 'private, no-cache';

const CACHING_HEADERS = {
  etag: { type: 'string', description: 'Strong entity tag of the body: it changes exactly when the body does' },
  'cache-control': { type: 'string', description: `\`${REVALIDATE}\`: a client may keep the response and revalidate it with If-None-Match` },
} as const;

const ENTITY_TAG = /(?:W\/)?("[^"]*")/g;

/** If-None-Match's weak comparison (RFC 9110 13.1.2): any listed tag with the same opaque value, or `*`. */
function matches(ifNoneMatch: string | undefined, etag: string): boolean {
  if (ifNoneMatch === undefined) return false;
  if (ifNoneMatch.trim() === '*') return true;
  for (const [, opaque] of ifNoneMatch.matchAll(ENTITY_TAG)) if (opaque === etag) return true;
  return false;
}

const readsOnly = (method: string | string[]) => [method].flat().every((one) => one === 'GET' || one === 'HEAD');

export interface ConditionalRequestsOptions {
  /**
   * Moves whenever any read may answer differently, and how long an answer may be served at most
   * (the pets cache's). With it, a revalidation whose tag is known to be current is answered
   * before the handler runs: nothing is read, serialised or digested.
   */
  dataVersion?: { current: () => number; ttlMs: number };
  now: () => number;
}

/** The tag of what a URL answered, while the data it was read from has not changed. */
interface KnownTag {
  etag: string;
  /** The handler's own Link (the next page), which a 304 repeats. */
  link?: string;
  version: number;
  expiresAt: number;
}

/** Bounds the memory of known tags: URLs remembered at most, and the longest remembered. */
const MAX_KNOWN_TAGS = 10_000;
const MAX_KNOWN_URL_LENGTH = 512;

declare module 'fastify' {
  interface FastifyRequest {
    /** The data version when the handler began: a tag computed from its answer is current for that version. */
    readAtVersion?: number;
    /**
     * Set when the request revalidates a tag known to be current: it is answered 304 before its
     * handler, and the rate limiter, knowing it will cost nothing, counts nothing.
     */
    notModified?: KnownTag;
  }
}

/**
 * Conditional GETs on the reading routes of its context: every 200 carries a strong ETag, a
 * digest of its body, so two instances give one body one tag; an If-None-Match that matches it
 * gets 304 with the same headers and no body. Registered before rate limiting and deprecation,
 * so that the 304 it documents gets their headers documented too.
 */
export default fp<ConditionalRequestsOptions>(
  async function conditionalRequests(app, { dataVersion, now }) {
    const known = new Map<string, KnownTag>();
    const remember = (url: string, tag: KnownTag) => {
      if (url.length > MAX_KNOWN_URL_LENGTH) return;
      known.delete(url);
      known.set(url, tag);
      if (known.size > MAX_KNOWN_TAGS) known.delete(known.keys().next().value!);
    };
    app.decorateRequest('readAtVersion', undefined);
    app.decorateRequest('notModified', undefined);

    app.addHook('onRoute', (route) => {
      if (!readsOnly(route.method) || !route.schema || route.schema.hide) return;
      route.schema.headers = withRequestHeaders(route.schema.headers as TSchema | undefined, { 'if-none-match': IfNoneMatch });
      const responses = route.schema.response as ResponseSchemas;
      route.schema.response = {
        ...responses,
        ...withHeaders({ 200: responses[200]! }, CACHING_HEADERS),
        // Every header of the 200 (RFC 9110 15.4.5: a 304 repeats what a 200 would carry), no body.
        304: {
          ...Type.Null({ description: 'Not Modified: the ETag matched If-None-Match; the client\'s copy is current. No body, and not counted against the rate limit' }),
          headers: { ...responses[200]!.headers, ...CACHING_HEADERS },
        },
      };
    });

    // Known before the rate limiter decides (so that it counts nothing), answered where only the
    // handler is left to skip: after authentication, validation and the sunset, which still refuse.
    // HEAD is left to the handler, whose 304 carries the length of the body it would have had.
    if (dataVersion) {
      // Callback hooks where no promise is needed: they run on every request of the context.
      app.addHook('onRequest', (request, _reply, done) => {
        const ifNoneMatch = request.headers['if-none-match'];
        // Only for a caller already known to be let in: anyone else is refused, and counted, as usual.
        if (request.method === 'GET' && ifNoneMatch !== undefined && request.apiKey) {
          const tag = known.get(request.url);
          if (tag && tag.version === dataVersion.current() && tag.expiresAt > now() && matches(ifNoneMatch, tag.etag)) request.notModified = tag;
        }
        done();
      });
      app.addHook('preHandler', (request, reply, done) => {
        const tag = request.notModified;
        if (!tag) {
          if (request.method === 'GET' && request.headers['if-none-match'] !== undefined) request.readAtVersion = dataVersion.current();
          return done();
        }
        // Answered here: the handler and the hooks after this one do not run.
        reply.code(304).headers({ etag: tag.etag, 'cache-control': REVALIDATE, ...(tag.link && { link: tag.link }) });
        reply.send();
      });
    }

    app.addHook('onSend', (request, reply, payload, done) => {
      if (reply.statusCode !== 200 || typeof payload !== 'string' || !readsOnly(request.method)) return done(null, payload);
      const etag = `"${hash('sha1', payload, 'base64url')}"`;
      reply.header('etag', etag).header('cache-control', REVALIDATE);
      const ifNoneMatch = request.headers['if-none-match'];
      // Remembered only for clients that revalidate: plain reads (most) pay nothing for it.
      if (dataVersion && request.readAtVersion !== undefined && ifNoneMatch !== undefined) {
        const link = reply.getHeader('link');
        remember(request.url, {
          etag,
          ...(typeof link === 'string' && { link }),
          version: request.readAtVersion,
          expiresAt: now() + dataVersion.ttlMs,
        });
      }
      if (!matches(ifNoneMatch, etag)) return done(null, payload);
      reply.code(304).removeHeader('content-type');
      // HEAD's own handler, which runs after this one, drops the body and sends its length, as a
      // 304 may (RFC 9110 8.6); for GET there is no body and no length.
      done(null, request.method === 'HEAD' ? payload : null);
    });
  },
  { name: 'conditional-requests', dependencies: ['auth'] },
);
