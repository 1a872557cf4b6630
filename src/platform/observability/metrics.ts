import fp from 'fastify-plugin';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { REPLICA_REFUSALS } from '../db/replicas.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** Where every plugin registers its metrics; served by the metrics server (metrics-server.ts). */
    metricsRegistry: Registry;
  }
}

/**
 * Prometheus metrics. Each plugin registers its own in this registry (rate-limit decisions, the
 * Redis fallback); this one counts and times every request and watches the database pool and,
 * with replicas, where reads went and how far behind each replica is.
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
    const { replicaReads } = app;
    if (replicaReads) {
      new Counter({
        name: 'db_reads_total',
        help: 'Reads of pets that reached PostgreSQL, by the server that answered them (primary or replica)',
        labelNames: ['target'] as const,
        registers: [registry],
        collect() {
          const { reads } = replicaReads.stats();
          this.reset();
          this.inc({ target: 'primary' }, reads.primary);
          this.inc({ target: 'replica' }, reads.replica);
        },
      });
      new Gauge({
        name: 'db_replica_lag_seconds',
        help:
          "How long each replica has been behind the primary's WAL position, as last polled; behind every position kept " +
          "(at an instance's start, behind the primary's position then), at least twice DATABASE_REPLICA_MAX_LAG_MS",
        labelNames: ['replica'] as const,
        registers: [registry],
        collect() {
          for (const replica of replicaReads.stats().replicas) this.set({ replica: replica.name }, replica.lagSeconds);
        },
      });
      new Gauge({
        name: 'db_replica_available',
        help: 'Whether each replica takes reads: reachable, not refused, and at most DATABASE_REPLICA_MAX_LAG_MS behind (1) or not (0)',
        labelNames: ['replica'] as const,
        registers: [registry],
        collect() {
          for (const replica of replicaReads.stats().replicas) this.set({ replica: replica.name }, replica.available ? 1 : 0);
        },
      });
      new Gauge({
        name: 'db_replica_refused',
        help:
          'Whether each replica answers but is refused (1) or not (0), by reason: other_cluster (a standby of another cluster ' +
          'than the primary: its system identifier differs) or not_in_recovery (promoted, or not a standby)',
        labelNames: ['replica', 'reason'] as const,
        registers: [registry],
        collect() {
          for (const replica of replicaReads.stats().replicas) {
            for (const reason of REPLICA_REFUSALS) this.set({ replica: replica.name, reason }, replica.refused === reason ? 1 : 0);
          }
        },
      });
    }
    app.decorate('metricsRegistry', registry);
  },
  { name: 'metrics', dependencies: ['database'] },
);
