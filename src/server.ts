import closeWithGrace from 'close-with-grace';
import { buildApp } from './app.js';
import { ConfigError, loadConfig } from './config.js';

let config;
try {
  config = loadConfig();
} catch (error) {
  if (!(error instanceof ConfigError)) throw error;
  console.error(error.message);
  process.exit(1);
}

const app = await buildApp(config);

closeWithGrace({ delay: 10_000 }, async ({ signal, err }) => {
  if (err) app.log.error({ err }, 'closing after an uncaught error');
  else app.log.info({ signal }, 'closing: finishing in-flight requests');
  await app.close();
});

await app.listen({ port: config.PORT, host: config.HOST });
app.log.info({ publicBaseUrl: config.PUBLIC_BASE_URL, database: app.db.kind }, 'pet store ready');
