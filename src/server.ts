import closeWithGrace from 'close-with-grace';
import { buildApp } from './app.js';
import { ConfigError, loadConfig } from './config.js';
import { DataDirInUseError } from './db/database.js';
import { developmentKeyGreeting } from './development-key.js';

let app;
try {
  app = await buildApp(loadConfig());
} catch (error) {
  if (!(error instanceof ConfigError || error instanceof DataDirInUseError)) throw error;
  console.error(error.message);
  process.exit(1);
}
const { config } = app;

closeWithGrace({ delay: 10_000 }, async ({ signal, err }) => {
  if (err) app.log.error({ err }, 'closing after an uncaught error');
  else app.log.info({ signal }, 'closing: finishing in-flight requests');
  await app.close();
});

await app.listen({ port: config.PORT, host: config.HOST });
await app.metrics.server.listen({ port: config.METRICS_PORT, host: config.METRICS_HOST });
app.log.info({ publicBaseUrl: config.PUBLIC_BASE_URL, database: app.db.kind }, 'pet store ready');
// Straight to stdout, not the log: a key must never be in the logs.
const greeting = await developmentKeyGreeting(app);
if (greeting) process.stdout.write(greeting);
