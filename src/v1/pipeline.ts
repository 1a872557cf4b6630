import type { FastifyPluginAsync } from 'fastify';
import auth from '../auth/plugin.js';
import conditionalRequests from '../platform/http/conditional-requests.js';
import deprecation from './deprecation.js';
import idempotency from '../idempotency/plugin.js';
import { notFoundHandler } from '../platform/errors.js';
import { createIdempotencyKeysRepository } from '../idempotency/repository.js';
import { documentOperation } from './contract.js';
import pets from '../pets/routes.js';
import rateLimitRoutes from '../rate-limit/routes.js';
import usageRoutes from '../usage/routes.js';
import { createUsageRepository } from '../usage/repository.js';
import { checkCostsServed } from '../rate-limit/settings.js';
import { isPreflight } from '../platform/http/cors.js';

export const API_PREFIX = '/v1';

export interface V1Options {
  idempotencyKeyRetentionHours: number;
}

/**
 * Everything under /v1, and the order one request takes through it, in one place (the rate
 * limiter, app.rateLimit, is the app's: the admin API reads and lifts its bans too):
 *
 *   onRequest   auth finds the caller (a key not known here is looked up only if the limiter lets
 *               its address spend a lookup); the limiter decides (429 ends here), then auth refuses
 *               (401; 403 for a read-only key's write, or a browser key's request from an origin not
 *               its own; the 429 of a lookup): every request is counted, refused ones too; the
 *               usage record (app.usage) counts each refusal of a request with a valid key
 *   validation  the operation's schemas (400); a deprecated operation past its sunset is a 410
 *   preHandler  a revalidation of a tag known current is answered 304 here, before the handler
 *   handler     pets/routes.ts; the free operations (rate-limit/free-calls.ts): rate-limit/routes.ts, usage/routes.ts
 *   onSend      ETag and 304; the limiter takes back a free revalidation, gives back the
 *               request's slot of its key's concurrency limit before the answer leaves, and gives
 *               a response answered before it decided (load shedding, shutdown, a failed key
 *               lookup) the headers of its caller as they stand; the usage record counts a request
 *               the limiter admitted as served, with the units it spent (none when free). A CORS
 *               preflight is answered in the app's first onRequest hooks (platform/http/cors.ts) and
 *               passes none of this
 *
 * Unknown paths pass the same pipeline through this context's own not-found handler.
 */
declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * The units the operation spends of a key's quota: app.rateLimit.costOf, set as the route is
     * added, unless the route sets its own (a free operation's 0: rate-limit/free-calls.ts), which RATE_LIMIT_COSTS cannot change.
     */
    cost?: number;
  }
}

const v1: FastifyPluginAsync<V1Options> = async (app, options) => {
  await app.register(auth);
  await app.register(idempotency, {
    retentionHours: options.idempotencyKeyRetentionHours,
    keys: createIdempotencyKeysRepository(app.db, 'api'),
    ownerOf: (request) => request.apiKey?.id,
  });
  await app.register(conditionalRequests, { dataVersion: app.dataVersion });
  await app.register(deprecation);

  const operations = new Set<string>();
  app.addHook('onRoute', (route) => {
    const operationId = route.schema?.operationId;
    if (route.config?.cost === undefined) {
      if (operationId) operations.add(operationId);
      route.config = { ...route.config, cost: app.rateLimit.costOf(operationId) };
    }
    documentOperation(route, options);
  });

  app.addHook('onRequest', async (request, reply) => {
    const now = app.now();
    // One read: each read of routeOptions makes a new object.
    const { config, schema } = request.routeOptions;
    const cost = config.cost ?? 1;
    const authentication = await app.auth.authenticate(request, now);
    const key = authentication.kind === 'key' ? authentication.key : undefined;
    const free = app.conditionalRequests.knownCurrent(request, key !== undefined);
    try {
      await app.rateLimit.admit(request, reply, { key, now, free, cost });
    } catch (error) {
      if (key) app.usage.refused(key, schema?.operationId, error);
      throw error;
    }
    if (key) app.usage.admitted(request, schema?.operationId, cost);
    const refusal = app.auth.refusal(authentication, config, request.headers.origin);
    if (refusal) throw refusal;
  });

  // Callback hooks: they run on every request, and need no promise.
  app.addHook('preHandler', (request, reply, done) => {
    if (!app.conditionalRequests.answerKnown(request, reply)) done();
  });
  app.addHook('onSend', (request, reply, payload, done) => {
    // A CORS preflight, answered before everything here (platform/http/cors.ts), costs and reads nothing either.
    if (isPreflight(request)) return done(null, payload);
    const answer = app.conditionalRequests.finish(request, reply, payload);
    const key = app.auth.keyOf(request);
    const settling = app.rateLimit.settle(request, reply, { key, free: answer.free });
    if (key) app.usage.served(request, key, answer.free);
    if (settling) settling.then(() => done(null, answer.payload), done);
    else done(null, answer.payload);
  });

  app.setNotFoundHandler(notFoundHandler);
  app.get('/openapi.json', { schema: { hide: true }, config: { public: true } }, async () => app.swagger());
  await app.register(pets);
  await app.register(rateLimitRoutes, { operations: () => [...operations] });
  await app.register(usageRoutes, { usage: createUsageRepository(app.db) });
  checkCostsServed(app.rateLimit.pricedOperations(), operations);
};

export default v1;
