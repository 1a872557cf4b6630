import fp from 'fastify-plugin';
import { collectDefaultMetrics, Histogram, Registry } from 'prom-client';

declare module 'fastify' {
  interface FastifyInstance {
    /** Where every plugin registers its metrics; served by the metrics server (metrics-server.ts). */
    metricsRegistry: Registry;
  }
}

/**
 * Prometheus metrics. Each plugin registers its own in this registry (rate-limit decisions,
 * pool connections, the Redis fallback); this one counts and times every request.
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
    app.decorate('metricsRegistry', registry);
  },
  { name: 'metrics' },
);
