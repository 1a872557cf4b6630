import closeWithGrace from 'close-with-grace';
import type { FastifyInstance } from 'fastify';
import { buildApp } from './app.js';
import { ConfigError, loadConfig } from './config.js';
import { DataDirInUseError } from './db/database.js';
import { developmentKeyGreeting } from './development-key.js';
import { buildMetricsServer } from './metrics-server.js';

/** A port that cannot be had; said in one line that names the setting. */
class ListenError extends Error {}

async function listenOn(server: FastifyInstance, port: number, host: string, setting: string) {
  try {
    await server.listen({ port, host });
  } catch (error) {
    const { code } = error as NodeJS.ErrnoException;
    const reason = { EADDRINUSE: 'the port is in use (another instance?)', EACCES: 'permission denied', EADDRNOTAVAIL: 'no such address here' }[code ?? ''];
    if (!reason) throw error;
    throw new ListenError(`Cannot listen on ${host}:${port}: ${reason}. Set ${setting} to a free port.`, { cause: error });
  }
}

let app: FastifyInstance;
try {
  app = await buildApp(loadConfig());
} catch (error) {
  if (!(error instanceof ConfigError || error instanceof DataDirInUseError)) throw error;
  console.error(error.message);
  process.exit(1);
}
const { config } = app;
const metricsServer = buildMetricsServer(app.metricsRegistry);
const close = () => Promise.all([app.close(), metricsServer.close()]);

closeWithGrace({ delay: 10_000 }, async ({ signal, err }) => {
  if (err) app.log.error({ err }, 'closing after an uncaught error');
  else app.log.info({ signal }, 'closing: finishing in-flight requests');
  await close();
});

try {
  // The metrics port first: once the API accepts requests, nothing else may make the process give up.
  await listenOn(metricsServer, config.METRICS_PORT, config.METRICS_HOST, 'METRICS_PORT');
  await listenOn(app, config.PORT, config.HOST, 'PORT');
} catch (error) {
  if (!(error instanceof ListenError)) throw error;
  console.error(error.message);
  await close();
  process.exit(1);
}
app.log.info({ publicBaseUrl: config.PUBLIC_BASE_URL, database: app.db.kind }, 'pet store ready');
// Straight to stdout, not the log: a key must never be in the logs.
const greeting = await developmentKeyGreeting(app);
if (greeting) process.stdout.write(greeting);
