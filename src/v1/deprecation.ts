import fp from 'fastify-plugin';
import { errors } from '../platform/errors.js';

export interface Deprecation {
  /** When the operation was deprecated (RFC 9745 Deprecation). */
  deprecatedAt: Date;
  /** When it stops working (RFC 8594 Sunset); from then on it answers 410. */
  sunset: Date;
  /** Absolute URL of what replaces it. */
  successor: string;
  /** Absolute URL of the documentation of the deprecation. */
  documentation: string;
}

/** On every response of a deprecated operation (documented by v1/contract.ts). */
export const DEPRECATION_HEADERS = {
  deprecation: { type: 'string', description: 'RFC 9745: @<unix seconds> when the operation was deprecated' },
  sunset: { type: 'string', description: 'RFC 8594: when the operation is removed; from then on it answers 410' },
  link: { type: 'string', description: 'rel="successor-version" and rel="deprecation" links' },
} as const;

declare module 'fastify' {
  interface FastifyContextConfig {
    deprecation?: Deprecation;
  }
}

/**
 * Any route whose config names a deprecation announces it on every response and is gone after
 * its sunset (on the app's clock, which tests move).
 */
export default fp(
  async function deprecation(app) {
    app.addHook('onRoute', (route) => {
      const deprecation = route.config?.deprecation;
      if (!deprecation) return;
      const headers = {
        deprecation: `@${Math.floor(deprecation.deprecatedAt.getTime() / 1000)}`,
        sunset: deprecation.sunset.toUTCString(),
        link: `<${deprecation.successor}>; rel="successor-version", <${deprecation.documentation}>; rel="deprecation"`,
      };
      const sunsetAt = deprecation.sunset.getTime();
      route.onSend = [
        ...[route.onSend ?? []].flat(),
        async (_request, reply, payload) => {
          const link = reply.getHeader('link');
          reply.headers({ ...headers, link: link ? `${String(link)}, ${headers.link}` : headers.link });
          return payload;
        },
      ];
      // After auth and rate limiting, before validation: a gone route is gone for every input.
      route.preValidation = [
        ...[route.preValidation ?? []].flat(),
        async () => {
          if (app.now() >= sunsetAt) {
            throw errors.gone(headers.sunset, deprecation.successor);
          }
        },
      ];
    });
  },
  { name: 'deprecation' },
);
