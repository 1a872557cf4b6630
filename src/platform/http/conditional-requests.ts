import fp from 'fastify-plugin';
import { hash } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { Lru } from '../lib/lru.js';

/**
 * A client may keep what it read and must ask again before each use (a 304 is cheap); no shared
 * cache may keep it at all, since the rate-limit headers belong to one API key.
 */
const REVALIDATE = 'private, no-cache';

/** On the 200 and 304 of a read (documented by v1/contract.ts). */
export const CACHING_HEADERS = {
  etag: { type: 'string', description: 'Strong entity tag of the body: it changes exactly when the body does' },
  'cache-control': {
    type: 'string',
    description: `\`${REVALIDATE}\`: a client may keep the response and revalidate it with If-None-Match`,
  },
} as const;

const ENTITY_TAG = /(?:W\/)?("[^"]*")/g;

/** Whether If-None-Match lists a tag with the same opaque value (RFC 9110 13.1.2's weak comparison). */
function listsTag(ifNoneMatch: string | undefined, etag: string): boolean {
  if (ifNoneMatch === undefined) return false;
  for (const [, opaque] of ifNoneMatch.matchAll(ENTITY_TAG)) if (opaque === etag) return true;
  return false;
}

/** If-None-Match's condition: a listed tag matches, or `*`, which matches any current representation. */
const matches = (ifNoneMatch: string | undefined, etag: string) => ifNoneMatch?.trim() === '*' || listsTag(ifNoneMatch, etag);

/**
 * Whether a response is a revalidation of a copy the client holds: a 304 for a tag it presented.
 * Only that is free (GitHub's rule); `*` holds no copy, so its 304 counts like the read it is.
 */
const revalidatesHeldCopy = (ifNoneMatch: string | undefined, statusCode: number, etag: unknown) =>
  statusCode === 304 && typeof etag === 'string' && listsTag(ifNoneMatch, etag);

const isRead = (method: string) => method === 'GET' || method === 'HEAD';
export const readsOnly = (method: string | string[]) => (typeof method === 'string' ? isRead(method) : method.every(isRead));

/**
 * The data version, which moves whenever any read may answer differently, and how long an answer
 * may be served at most (the pets cache's).
 */
export interface DataVersion {
  current: () => number;
  ttlMs: number;
}

export interface ConditionalRequestsOptions {
  /**
   * With it, a revalidation whose tag is known to be current is answered before the handler runs:
   * nothing is read, serialised or digested.
   */
  dataVersion?: DataVersion;
}

/** The tag of what a URL answered, while the data it was read from has not changed. */
interface KnownTag {
  etag: string;
  /** The handler's own Link (the next page), which a 304 repeats. */
  link?: string;
  /** The data version it was read at. */
  version: number;
  expiresAt: number;
}

/** Bounds the memory of known tags: URLs remembered at most, and the longest remembered. */
const MAX_KNOWN_TAGS = 10_000;
const MAX_KNOWN_URL_LENGTH = 512;
/** Bounds the bodies kept to tell whether a URL answered the same again: their characters in all. */
const MAX_DIGESTED_CHARACTERS = 4 * 1024 * 1024;

/** The last body a URL answered, and its tag. */
interface Digested {
  body: string;
  etag: string;
}

/**
 * A request found to revalidate a known-current tag, and the data version a revalidating read
 * began at: request decorations only this module can name (as the limiter keeps its charge).
 */
const NOT_MODIFIED = Symbol('notModified');
const READ_AT_VERSION = Symbol('readAtVersion');
type Revalidating = FastifyRequest & { [NOT_MODIFIED]?: KnownTag; [READ_AT_VERSION]?: number };

declare module 'fastify' {
  interface FastifyInstance {
    conditionalRequests: ConditionalRequests;
  }
  interface FastifyContextConfig {
    /**
     * A read whose answer changes with every request, not with the data (the quota lookup): its tag
     * is never remembered as current, so a revalidation of it always reaches its handler.
     */
    volatile?: boolean;
  }
}

export interface ConditionalRequests {
  /**
   * Whether this GET, of a caller `authenticated` (with a valid key, as auth found it), revalidates
   * a tag known to be current: it will be answered 304 before its handler (see answerKnown), so the
   * limiter need not count it.
   */
  knownCurrent(request: FastifyRequest, authenticated: boolean): boolean;
  /** Before the handler: answers 304 for a known-current tag (true), or notes the data version the handler reads at. */
  answerKnown(request: FastifyRequest, reply: FastifyReply): boolean;
  /** Once answered: the ETag of a 200, a 304 when If-None-Match matches it; `free` when the answer revalidates a copy the client holds. */
  finish(request: FastifyRequest, reply: FastifyReply, payload: unknown): { payload: unknown; free: boolean };
}

/**
 * Conditional GETs: every 200 of a read carries a strong ETag, a digest of its body, so two
 * instances give one body one tag; an If-None-Match that matches it gets 304 with the same
 * headers and no body.
 */
export default fp<ConditionalRequestsOptions>(
  async function conditionalRequests(app, { dataVersion }) {
    const known = new Lru<string, KnownTag>(MAX_KNOWN_TAGS);
    const remember = (url: string, tag: KnownTag) => {
      if (url.length <= MAX_KNOWN_URL_LENGTH) known.set(url, tag);
    };
    // A page is digested once per version: while a URL answers the same body, comparing it with
    // the last one (a memcmp) costs far less than hashing it again.
    const digested = new Lru<string, Digested>(MAX_DIGESTED_CHARACTERS);
    const tagOf = (url: string, body: string) => {
      const last = digested.get(url);
      if (last?.body === body) return last.etag;
      const etag = `"${hash('sha1', body, 'base64url')}"`;
      if (url.length <= MAX_KNOWN_URL_LENGTH) digested.set(url, { body, etag }, url.length + body.length);
      return etag;
    };
    app.decorateRequest(NOT_MODIFIED, undefined);
    app.decorateRequest(READ_AT_VERSION, undefined);

    app.decorate('conditionalRequests', {
      knownCurrent(request, authenticated) {
        const ifNoneMatch = request.headers['if-none-match'];
        // Only for a caller already known to be let in: anyone else is refused, and counted, as usual.
        // HEAD is left to the handler, whose 304 carries the length of the body it would have had.
        if (!dataVersion || request.method !== 'GET' || ifNoneMatch === undefined || !authenticated) return false;
        const tag = known.get(request.url);
        if (!tag || tag.version !== dataVersion.current() || tag.expiresAt <= app.now() || !listsTag(ifNoneMatch, tag.etag)) return false;
        (request as Revalidating)[NOT_MODIFIED] = tag;
        return true;
      },

      answerKnown(request, reply) {
        const tag = (request as Revalidating)[NOT_MODIFIED];
        if (!tag) {
          const revalidates = request.method === 'GET' && request.headers['if-none-match'] !== undefined;
          if (dataVersion && revalidates && !request.routeOptions.config.volatile) {
            (request as Revalidating)[READ_AT_VERSION] = dataVersion.current();
          }
          return false;
        }
        reply.code(304).headers({ etag: tag.etag, 'cache-control': REVALIDATE, ...(tag.link && { link: tag.link }) });
        reply.send();
        return true;
      },

      finish(request, reply, payload) {
        const ifNoneMatch = request.headers['if-none-match'];
        const free = () => revalidatesHeldCopy(ifNoneMatch, reply.statusCode, reply.getHeader('etag'));
        if (reply.statusCode !== 200 || typeof payload !== 'string' || !readsOnly(request.method)) return { payload, free: free() };
        const etag = tagOf(request.url, payload);
        reply.header('etag', etag).header('cache-control', REVALIDATE);
        // Remembered only for clients that revalidate: plain reads (most) pay nothing for it.
        const version = (request as Revalidating)[READ_AT_VERSION];
        if (dataVersion && version !== undefined && ifNoneMatch !== undefined) {
          const link = reply.getHeader('link');
          remember(request.url, { etag, ...(typeof link === 'string' && { link }), version, expiresAt: app.now() + dataVersion.ttlMs });
        }
        if (!matches(ifNoneMatch, etag)) return { payload, free: false };
        reply.code(304).removeHeader('content-type');
        // HEAD's own handler, which runs after this one, drops the body and sends its length, as a
        // 304 may (RFC 9110 8.6); for GET there is no body and no length.
        return { payload: request.method === 'HEAD' ? payload : null, free: free() };
      },
    } satisfies ConditionalRequests);
  },
  { name: 'conditional-requests' },
);
