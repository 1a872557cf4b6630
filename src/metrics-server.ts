import Fastify, { type FastifyInstance } from 'fastify';
import type { Registry } from 'prom-client';

/**
 * GET /metrics for Prometheus, on a port of its own apart from the API: not public, not
 * authenticated, not rate limited, and kept off the load balancer.
 */
export function buildMetricsServer(registry: Registry): FastifyInstance {
  const server = Fastify({ logger: false });
  server.get('/metrics', async (_request, reply) => reply.type(registry.contentType).send(await registry.metrics()));
  return server;
}
