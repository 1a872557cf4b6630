import { register } from 'node:module';
import { FastifyOtelInstrumentation } from '@fastify/otel';
import {
  context,
  trace,
  TraceFlags,
  type Context,
  type Span,
  type SpanOptions,
  type Tracer,
  type TracerProvider,
} from '@opentelemetry/api';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { IORedisInstrumentation } from '@opentelemetry/instrumentation-ioredis';
import { PgInstrumentation } from '@opentelemetry/instrumentation-pg';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BatchSpanProcessor, NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { ATTR_SERVICE_NAME } from '@opentelemetry/semantic-conventions';

/**
 * Requests that are not worth a trace: probes, scraped every few seconds (and the metrics server's
 * one route), with or without a query. @fastify/otel asks at every hook of every request: no split.
 */
const UNTRACED = /^\/(?:healthz|readyz|metrics)(?:\?|$)/;

/** A span of this process that records nothing and was not sampled (not one named by a `traceparent`). */
function isUnsampledLocal(span: Span | undefined): span is Span {
  if (!span || span.isRecording()) return false;
  const { traceFlags, isRemote } = span.spanContext();
  return !isRemote && (traceFlags & TraceFlags.SAMPLED) === 0;
}

/**
 * A span started beneath an unsampled span of this process is not sampled either, whichever
 * sampler `OTEL_TRACES_SAMPLER` names (each follows its parent, or decides by the trace id they
 * share). So it is not started: the unsampled parent is handed back, and an unsampled request
 * costs its hooks, handler, queries and commands no new span, ids, attributes or sampling decision.
 * A remote parent (a `traceparent` header) still gets its decision. @fastify/otel and the pg and
 * ioredis instrumentations have no option for this (docs/decisions/unsampled-spans.md).
 */
function skipBeneathUnsampled(provider: TracerProvider): TracerProvider {
  return {
    getTracer(...args): Tracer {
      const tracer = provider.getTracer(...args);
      const startSpan = (name: string, options?: SpanOptions, ctx: Context = context.active()) => {
        const parent = options?.root ? undefined : trace.getSpan(ctx);
        return isUnsampledLocal(parent) ? parent : tracer.startSpan(name, options, ctx);
      };
      return {
        startSpan,
        startActiveSpan(name: string, ...rest: unknown[]) {
          const fn = rest.pop() as (span: Span) => unknown;
          const [options, ctx = context.active()] = rest as [SpanOptions | undefined, Context | undefined];
          const span = startSpan(name, options, ctx);
          return context.with(trace.setSpan(ctx, span), fn, undefined, span);
        },
      };
    },
  };
}

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
    tracerProvider: skipBeneathUnsampled(provider),
    instrumentations: [
      new PgInstrumentation(),
      // The command alone: its keys and arguments name key ids and, for anonymous callers, client addresses.
      new IORedisInstrumentation({ dbStatementSerializer: (command) => command }),
      new FastifyOtelInstrumentation({
        registerOnInitialization: true,
        // Asked again at each hook and the handler, within the request: beneath an unsampled
        // request they run as they are, without a span or a context of their own.
        ignorePaths: ({ url: path }: { url: string }) => UNTRACED.test(path) || isUnsampledLocal(trace.getActiveSpan()),
      }),
    ],
  });
  return () => provider.shutdown();
}
