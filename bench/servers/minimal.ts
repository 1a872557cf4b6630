import Fastify, { type FastifyInstance } from 'fastify';

/**
 * The baselines: Fastify as its documentation starts it, with the same logger level as the
 * service but no per-request log lines, so they stay ceilings. Ratios to them are therefore
 * conservative for the service, which logs every request. PORT is chosen by the harness.
 */
export async function serveMinimal(routes: (app: FastifyInstance) => void): Promise<void> {
  const app = Fastify({ logger: { level: 'info' }, disableRequestLogging: true });
  routes(app);
  await app.listen({ port: Number(process.env.PORT), host: '127.0.0.1' });
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.once(signal, () => void app.close().then(() => process.exit(0)));
  }
}
