import { register } from 'node:module';
import { FastifyOtelInstrumentation } from '@fastify/otel';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { IORedisInstrumentation } from '@opentelemetry/instrumentation-ioredis';
import { PgInstrumentation } from '@opentelemetry/instrumentation-pg';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BatchSpanProcessor, NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { ATTR_SERVICE_NAME } from '@opentelemetry/semantic-conventions';

/** Requests that are not worth a trace: probes, scraped every few seconds (and the metrics server's one route). */
const UNTRACED = new Set(['/healthz', '/readyz', '/metrics']);

/**
 * The OpenTelemetry SDK, loaded only when tracing is configured (tracing.ts): spans of each
 * request and its hooks and handler (@fastify/otel, registered on every Fastify instance as it is
 * created), of each PostgreSQL query (pg) and Redis command (ioredis), batched and sent as OTLP
 * over HTTP (protobuf is not needed: the exporter sends JSON).
 */
export function startSdk({ url, serviceName }: { url: string; serviceName: string }): () => Promise<void> {
  // The app imports pg and ioredis as ES modules: import-in-the-middle's hook lets the
  // instrumentations patch them as they load (require-in-the-middle sees only require()).
  register('@opentelemetry/instrumentation/hook.mjs', import.meta.url);
  const provider = new NodeTracerProvider({
    resource: resourceFromAttributes({ [ATTR_SERVICE_NAME]: serviceName }),
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url }))],
  });
  provider.register();
  registerInstrumentations({
    tracerProvider: provider,
    instrumentations: [
      new PgInstrumentation(),
      // The command alone: its keys and arguments name key ids and, for anonymous callers, client addresses.
      new IORedisInstrumentation({ dbStatementSerializer: (command) => command }),
      new FastifyOtelInstrumentation({
        registerOnInitialization: true,
        ignorePaths: ({ url: path }: { url: string }) => UNTRACED.has(path.split('?')[0]!),
      }),
    ],
  });
  return () => provider.shutdown();
}
