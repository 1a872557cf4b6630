import { randomUUID } from 'node:crypto';
import Fastify, { LogController, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import pino, { type DestinationStream } from 'pino';
import { trustedProxies, type Config } from './config.js';
import database from './plugins/database.js';
import { sendError } from './errors.js';
import { clientErrorHandler, frameworkErrors } from './http/client-errors.js';
import { escapeMalformedPath } from './http/malformed-url.js';
import { SECURITY_HEADERS } from './http/security-headers.js';
import errorHandler from './plugins/error-handler.js';
import health from './plugins/health.js';
import loadShedding from './plugins/load-shedding.js';
import metrics from './plugins/metrics.js';
import openapi from './plugins/openapi.js';
import v1, { API_PREFIX } from './routes/v1/index.js';
import { formatValidationError, validatorCompiler } from './validation.js';

declare module 'fastify' {
  interface FastifyInstance {
    config: Config;
  }
}

export interface AppDependencies {
  /** The clock, in milliseconds since the epoch; tests move it instead of waiting. */
  now?: () => number;
  /** Where logs go; stdout by default. */
  logStream?: DestinationStream;
}

/** One line per request, when it completes, with what an operator needs to find it again. */
class RequestLog extends LogController {
  override incomingRequest() {}

  override requestCompleted(error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply) {
    const line = {
      method: request.method,
      route: request.routeOptions.url,
      status: reply.statusCode,
      ms: reply.elapsedTime,
      keyId: request.apiKey?.id,
    };
    if (error) reply.log.error({ ...line, err: error }, 'request failed');
    else reply.log.info(line, 'request');
  }
}

/** 16 KiB is far more than any NewPet needs and small enough that no body can pin memory. */
const BODY_LIMIT = 16 * 1024;

/**
 * A request line is bounded by Node's 16 KiB header limit already; the router's own cut-off
 * (100 characters by default) would answer a long path parameter with the framework's 414 before
 * any hook runs, where validation gives the usual 400.
 */
const MAX_PARAM_LENGTH = 16 * 1024;

/** Builds the whole service from its configuration: the server and the tests build it alike. */
export async function buildApp(config: Config, deps: AppDependencies = {}): Promise<FastifyInstance> {
  // Asynchronous: lines written while a write is under way are gathered into the next one, so
  // under load the log costs a system call per batch, not per request. Flushed on close.
  const stdout = deps.logStream ? undefined : pino.destination({ dest: 1, sync: false });
  const logStream = deps.logStream ?? stdout!;
  const app = Fastify({
    logger: {
      level: config.LOG_LEVEL,
      // Headers are never logged; should one ever be, its credentials are not.
      redact: { paths: ['req.headers.authorization', 'headers.authorization'], censor: '[redacted]' },
      stream: logStream,
    },
    logController: new RequestLog(),
    genReqId: () => randomUUID(),
    bodyLimit: BODY_LIMIT,
    // Opening and migrating the database is part of start-up; a cold embedded one can be slow.
    pluginTimeout: 120_000,
    // Slow or stalled clients are cut off (slowloris): headers, the whole request, and a socket
    // that sends or reads nothing each have a deadline, checked every second.
    http: {
      headersTimeout: Math.min(config.HEADERS_TIMEOUT_MS, config.REQUEST_TIMEOUT_MS),
      connectionsCheckingInterval: 1_000,
    },
    requestTimeout: config.REQUEST_TIMEOUT_MS,
    connectionTimeout: config.IDLE_TIMEOUT_MS,
    keepAliveTimeout: 5_000,
    clientErrorHandler,
    rewriteUrl: escapeMalformedPath,
    frameworkErrors,
    routerOptions: { maxParamLength: MAX_PARAM_LENGTH },
    // While closing, requests that still arrive on open keep-alive connections get the service's
    // own 503 (below) instead of Fastify's, whose body is not an Error and has no Retry-After.
    return503OnClosing: false,
    schemaErrorFormatter: formatValidationError,
    // Only the listed proxies are believed about the client address (X-Forwarded-For).
    trustProxy: trustedProxies(config.TRUST_PROXY),
  });
  app.server.maxConnections = config.MAX_CONNECTIONS;
  app.addHook('onClose', async () => stdout?.flushSync());
  let closing = false;
  app.addHook('preClose', async () => {
    closing = true;
  });
  // These two run on every request, so they are callback hooks: no promise each time.
  app.addHook('onRequest', (_request, reply, done) => {
    reply.headers(SECURITY_HEADERS);
    // Shutting down (SIGTERM): in-flight requests finish, new ones are refused before any work,
    // and Fastify has already set Connection: close on them.
    if (closing) {
      sendError(reply.header('retry-after', '5'), 503, 'service_unavailable', 'The server is shutting down; retry later');
      return;
    }
    done();
  });
  // Requests in flight when closing began end their connections too: otherwise each would sit
  // idle until its keep-alive timeout and hold up the close (and the exit) that long.
  app.addHook('onSend', (_request, reply, payload, done) => {
    if (closing) reply.header('connection', 'close');
    done(null, payload);
  });
  app.setValidatorCompiler(validatorCompiler);
  // JSON is the only media type the API reads; anything else is a 415.
  app.removeContentTypeParser('text/plain');
  app.decorate('config', config);

  await app.register(errorHandler);
  await app.register(metrics);
  await app.register(database, config);
  await app.register(loadShedding, {
    maxEventLoopDelayMs: config.LOAD_SHED_EVENT_LOOP_DELAY_MS,
    maxPoolWaiting: config.LOAD_SHED_POOL_WAITING,
  });
  await app.register(openapi, { publicBaseUrl: config.PUBLIC_BASE_URL });
  await app.register(health);
  await app.register(v1, {
    prefix: API_PREFIX,
    now: deps.now ?? Date.now,
    rateLimit: {
      ban: { threshold: config.RATE_LIMIT_BAN_THRESHOLD, durationMs: config.RATE_LIMIT_BAN_SECONDS * 1000 },
      redisUrl: config.REDIS_URL,
      redisKeyPrefix: config.REDIS_KEY_PREFIX,
    },
  });
  return app;
}
