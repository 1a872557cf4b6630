import closeWithGrace from 'close-with-grace';
import type { FastifyInstance } from 'fastify';
import { setTimeout as sleep } from 'node:timers/promises';
import { loadConfig } from './config/load.js';
import { DATABASE_CODES } from './platform/db/errors.js';
import { DOMAIN_CODES, hasCode } from './platform/domain-errors.js';
import { LISTEN_CODE, listenOn } from './platform/http/listen.js';
import { developmentKeyGreeting } from './api-keys/development-key.js';
import { keysSocketPath, serveKeysCommands } from './cli/keys/socket.js';
import { buildMetricsServer } from './platform/observability/metrics-server.js';
import { startTracing } from './platform/observability/tracing.js';

let app: FastifyInstance;
let admin: { server: FastifyInstance; prefix: string } | undefined;
try {
  const settings = loadConfig();
  // Before the app's modules (the admin API's too) are imported: tracing instruments pg and ioredis as they load.
  await startTracing(settings);
  const [{ buildApp }, { ADMIN_PREFIX, buildAdminServer }] = await Promise.all([import('./app.js'), import('./admin/server.js')]);
  app = await buildApp(settings);
  // Off unless ADMIN_PORT is set; it closes before the app, whose database it uses.
  if (settings.ADMIN_PORT !== undefined) admin = { server: await buildAdminServer(app), prefix: ADMIN_PREFIX };
} catch (error) {
  if (!hasCode(error, DOMAIN_CODES.config, DATABASE_CODES.dataDirInUse)) throw error;
  console.error(error.message);
  process.exit(1);
}
const { config } = app;
const metricsServer = buildMetricsServer(app.metricsRegistry);
// The embedded database admits this process only: the keys command run beside it asks here.
const stopKeysCommands =
  app.db.kind === 'pglite' && !config.DATA_DIR.startsWith('memory://')
    ? await serveKeysCommands(app, keysSocketPath(config.DATA_DIR))
    : undefined;
const close = async () => {
  await stopKeysCommands?.();
  await admin?.server.close();
  await Promise.all([app.close(), metricsServer.close()]);
};

/** In-flight requests get this long to finish once the server closes. */
const CLOSE_MS = 10_000;

/**
 * SIGTERM (docker stop, Kubernetes, ECS) drains first: /readyz answers 503 and everything else is
 * still served, with Connection: close, for SHUTDOWN_DRAIN_MS, so balancers stop sending here
 * before the port closes (docs/deploying.md, "Rolling deploys"); then the server closes and in-flight
 * requests finish. SIGINT is someone at a terminal, behind no balancer: it closes at once. The
 * whole stays under close-with-grace's delay, SHUTDOWN_DRAIN_MS + 10 s, after which the process
 * exits 1; docker-compose.yml's stop_grace_period is above both.
 */
closeWithGrace({ delay: config.SHUTDOWN_DRAIN_MS + CLOSE_MS }, async ({ signal, err }) => {
  if (err) {
    app.log.error({ err }, 'closing after an uncaught error');
    // Written before closing is tried, which may hang on whatever failed.
    await app.flushLog();
  } else if (signal === 'SIGTERM' && config.SHUTDOWN_DRAIN_MS > 0) {
    app.shutdown.drain();
    app.log.info({ signal, drainMs: config.SHUTDOWN_DRAIN_MS }, 'draining: /readyz answers 503, requests are still served');
    await sleep(config.SHUTDOWN_DRAIN_MS);
  }
  if (!err) app.log.info({ signal }, 'closing: finishing in-flight requests');
  await close();
});

try {
  // The metrics and admin ports first: once the API accepts requests, nothing else may make the process give up.
  await listenOn(metricsServer, config.METRICS_PORT, config.METRICS_HOST, 'METRICS_PORT');
  if (admin) await listenOn(admin.server, config.ADMIN_PORT!, config.ADMIN_HOST, 'ADMIN_PORT');
  await listenOn(app, config.PORT, config.HOST, 'PORT');
} catch (error) {
  if (!hasCode(error, LISTEN_CODE)) throw error;
  console.error(error.message);
  await close();
  process.exit(1);
}
app.log.info(
  {
    publicBaseUrl: config.PUBLIC_BASE_URL,
    docs: config.PUBLIC_BASE_URL.replace(/\/v1$/, '/docs'),
    database: app.db.kind,
    admin: admin && `${admin.server.listeningOrigin}${admin.prefix}`,
  },
  'pet store ready',
);
// Straight to stdout, not the log: a key must never be in the logs. When whatever read stdout has
// gone (a closed pipe), the greeting is lost as the log's lines are, and the server goes on.
const greeting = await developmentKeyGreeting(app);
if (greeting) process.stdout.once('error', () => {}).write(greeting);
