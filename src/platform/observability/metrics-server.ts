import Fastify, { type FastifyInstance } from 'fastify';
import type { Registry } from 'prom-client';
import { notFoundHandler } from '../errors.js';

/**
 * GET /metrics for Prometheus, on a port of its own apart from the API: not public, not
 * authenticated, not rate limited, and kept off the load balancer. Any other path is the API's
 * 404 Error, which repeats at most the start of the path.
 */
export function buildMetricsServer(registry: Registry): FastifyInstance {
  const server = Fastify({ logger: false });
  server.get('/metrics', async (_request, reply) => reply.type(registry.contentType).send(await registry.metrics()));
  server.setNotFoundHandler(notFoundHandler);
  return server;
}
