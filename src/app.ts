import Fastify, { type FastifyInstance } from 'fastify';
import type { DestinationStream } from 'pino';
import type { Config } from './config/load.js';
import { listenerOptions, serveJson } from './platform/http/listener.js';
import { requestIdGenerator } from './platform/http/request-id.js';
import apiKeys from './api-keys/plugin.js';
import database from './platform/db/plugin.js';
import cors from './platform/http/cors.js';
import errorHandler from './platform/http/error-handler.js';
import health from './platform/http/health.js';
import loadShedding from './platform/http/load-shedding.js';
import metrics from './platform/observability/metrics.js';
import { KEY_IN_REQUEST_LOG, SECURITY_SCHEME } from './auth/plugin.js';
import openapi, { documentedResponseHeaders } from './platform/http/openapi.js';
import rateLimit from './rate-limit/plugin.js';
import pets from './pets/plugin.js';
import plans from './plans/plugin.js';
import shutdown from './platform/http/shutdown.js';
import usage from './usage/plugin.js';
import v1, { API_PREFIX } from './v1/pipeline.js';
import webhooks, { recordRefills, recordUsageHours } from './webhooks/plugin.js';
import credits from './credits/plugin.js';
import { logFormat, logOutput } from './platform/observability/log-output.js';
import { stopTracing, traceLogMixin } from './platform/observability/tracing.js';

declare module 'fastify' {
  interface FastifyInstance {
    config: Config;
    /** The clock, in ms since the epoch: key expiry, rate limits, caches and the sunset read it; tests move it. */
    now: () => number;
    /** Writes out the log lines still buffered (platform/observability/log-output.ts); the app does at close, server.ts on a fatal error. */
    flushLog: () => Promise<void>;
  }
}

export interface AppDependencies {
  /** The clock, in milliseconds since the epoch; tests move it instead of waiting. */
  now?: () => number;
  /** Where logs go; stdout by default. */
  logStream?: DestinationStream;
  /** The wait before a failed usage event is sent again the first time (5 s); tests shorten it. */
  webhookFirstRetryMs?: number;
}

/** 16 KiB is far more than any NewPet needs and small enough that no body can pin memory. */
const BODY_LIMIT = 16 * 1024;

/**
 * A request line is bounded by Node's 16 KiB header limit already; the router's own cut-off
 * (100 characters by default) would answer a long path parameter with the framework's 414 before
 * any hook runs, where validation gives the usual 400.
 */
const MAX_PARAM_LENGTH = 16 * 1024;

/**
 * Idle keep-alive connections close after this long. A proxy in front must let go of its idle
 * upstream connections sooner (deploy/nginx.conf.template: 4 s), or it may send a request down
 * a connection the service is closing.
 */
const KEEP_ALIVE_TIMEOUT_MS = 5_000;

/** Builds the whole service from its configuration: the server and the tests build it alike. */

export async function buildApp(config: Config, deps: AppDependencies = {}): Promise<FastifyInstance> {
  // JSON on stdout, in batches (or each line at once: LOG_SYNC), flushed on close; pretty on a terminal (platform/observability/log-output.ts).
  const stdout = deps.logStream
    ? undefined
    : await logOutput(logFormat(config.LOG_FORMAT, process.stdout.isTTY), { sync: config.LOG_SYNC });
  const logStream = deps.logStream ?? stdout!.stream;
  const flushLog = stdout?.flush ?? (async () => {});
  const app = Fastify({
    logger: {
      level: config.LOG_LEVEL,
      // Headers are never logged; should one ever be, its credentials are not.
      redact: { paths: ['req.headers.authorization', 'headers.authorization'], censor: '[redacted]' },
      stream: logStream,
      // With tracing on, each line written within a request names its trace and span.
      mixin: await traceLogMixin(config),
    },
    ...listenerOptions(config, KEY_IN_REQUEST_LOG),
    // X-Request-Id from a trusted proxy when well-formed, else a new UUID (platform/http/request-id.ts).
    genReqId: requestIdGenerator(config.trustedProxies),
    bodyLimit: BODY_LIMIT,
    // Opening and migrating the database is part of start-up; a cold embedded one can be slow.
    pluginTimeout: 120_000,
    keepAliveTimeout: KEEP_ALIVE_TIMEOUT_MS,
    routerOptions: { maxParamLength: MAX_PARAM_LENGTH },
    // While closing, requests that still arrive on open keep-alive connections get the service's
    // own 503 (below) instead of Fastify's, whose body is not an Error and has no Retry-After.
    return503OnClosing: false,
    // Only the listed proxies are believed about the client address (X-Forwarded-For).
    trustProxy: config.trustedProxies,
  });
  app.server.maxConnections = config.MAX_CONNECTIONS;
  app.addHook('onClose', async () => flushLog());
  // Spans still batched are sent before the process exits (nothing to do without tracing).
  app.addHook('onClose', stopTracing);
  serveJson(app);
  app.decorate('config', config);
  app.decorate('now', deps.now ?? Date.now);
  app.decorate('flushLog', flushLog);

  await app.register(errorHandler);
  // Before any route, and before cors, which reads the document once it is complete.
  await app.register(openapi, {
    info: {
      title: 'Pet store',
      version: '1.0.0',
      description:
        'Browse and manage the animals available for adoption. Every error is an `Error` body ' +
        "`{code, message, status}`. The guides are in the `docs/` folder of the service's repository: " +
        '`docs/api.md` (errors and their codes, pagination, retries with Idempotency-Key, conditional reads, ' +
        'rate limits and bans, deprecation), `docs/api-keys.md` (how keys are issued), and `docs/decisions/` ' +
        '(what this service decided where the interface is silent). The official TypeScript client, which retries, ' +
        'waits out rate limits and follows pages for its callers, is in `client/` (`client/README.md`).',
    },
    serverUrl: config.PUBLIC_BASE_URL,
    apiPrefix: API_PREFIX,
    tags: [
      { name: 'pets', description: 'Animals available for adoption' },
      { name: 'rate limits', description: "The caller's own limits and what is left of them" },
      { name: 'usage', description: "The caller's own usage record: what it was served and refused, hour by hour" },
    ],
    securityScheme: {
      name: SECURITY_SCHEME,
      description: 'An API key, sent as `Authorization: Bearer <API key>`. `docs/api-keys.md` says how keys are issued.',
    },
  });
  // Ahead of shutdown and load shedding, whose answers a page must be able to read too.
  if (config.corsOrigins !== 'off') {
    await app.register(cors, { origins: config.corsOrigins, documentedHeaders: () => documentedResponseHeaders(app.swagger()) });
  }
  await app.register(shutdown);
  await app.register(database, config);
  await app.register(metrics);
  await app.register(pets, { cacheMaxBytes: config.PETS_CACHE_MAX_BYTES });
  await app.register(plans, {
    shadowPlans: config.rateLimitShadowPlans,
    concurrency: config.rateLimitConcurrency,
  });
  await app.register(apiKeys, { cacheMaxEntries: config.KEY_CACHE_MAX_ENTRIES, costs: config.rateLimitCosts });
  await app.register(loadShedding, {
    maxEventLoopDelayMs: config.LOAD_SHED_EVENT_LOOP_DELAY_MS,
    maxPoolWaiting: config.LOAD_SHED_POOL_WAITING,
  });
  await app.register(health);
  await app.register(credits, { refilled: config.webhooks ? recordRefills(app.db) : undefined });
  await app.register(rateLimit, {
    ban: { threshold: config.RATE_LIMIT_BAN_THRESHOLD, durationMs: config.RATE_LIMIT_BAN_SECONDS * 1000 },
    redis: config.redisTarget,
    redisCredentials: config.redisCredentials,
    redisKeyPrefix: config.REDIS_KEY_PREFIX,
    ipv6Prefix: config.RATE_LIMIT_IPV6_PREFIX,
    costs: config.rateLimitCosts,
  });
  if (config.webhooks) {
    await app.register(webhooks, {
      ...config.webhooks,
      retentionDays: config.WEBHOOK_RETENTION_DAYS,
      firstRetryMs: deps.webhookFirstRetryMs,
    });
  }
  await app.register(usage, {
    retentionDays: config.USAGE_RETENTION_DAYS,
    export: config.usageExport && { delayMs: config.usageExport.delayMs, exported: recordUsageHours(app.db, config.usageExport.source) },
  });
  await app.register(v1, {
    prefix: API_PREFIX,
    idempotencyKeyRetentionHours: config.IDEMPOTENCY_KEY_RETENTION_HOURS,
  });
  return app;
}
