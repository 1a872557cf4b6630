import fp from 'fastify-plugin';
import { collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';

declare module 'fastify' {
  interface FastifyInstance {
    /** Where every plugin registers its metrics; served by the metrics server (metrics-server.ts). */
    metricsRegistry: Registry;
  }
}

/**
 * Prometheus metrics. Each plugin registers its own in this registry (rate-limit decisions, the
 * Redis fallback); this one counts and times every request and watches the database pool.
 */
export default fp(
  async function metrics(app) {
    const registry = new Registry();
    collectDefaultMetrics({ register: registry });
    const requests = new Histogram({
      name: 'http_request_duration_seconds',
      help: 'Requests by route, method and status, and how long they took',
      labelNames: ['method', 'route', 'status_code'] as const,
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
      registers: [registry],
    });
    // A callback hook: it runs on every response, and needs no promise.
    app.addHook('onResponse', (request, reply, done) => {
      // Unmatched URLs share one label, so scanners cannot create series without bound.
      const route = request.routeOptions.url ?? 'unmatched';
      requests.observe({ method: request.method, route, status_code: reply.statusCode }, reply.elapsedTime / 1000);
      done();
    });
    const { db } = app;
    if (db.poolStats) {
      const stats = db.poolStats.bind(db);
      new Gauge({
        name: 'db_pool_connections',
        help: 'PostgreSQL pool connections in use and idle, and requests waiting for one',
        labelNames: ['state'] as const,
        registers: [registry],
        collect() {
          const { total, idle, waiting } = stats();
          this.set({ state: 'in_use' }, total - idle);
          this.set({ state: 'idle' }, idle);
          this.set({ state: 'waiting' }, waiting);
        },
      });
    }
    app.decorate('metricsRegistry', registry);
  },
  { name: 'metrics', dependencies: ['database'] },
);
