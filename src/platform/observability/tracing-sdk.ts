import { subscribe } from 'node:diagnostics_channel';
import { register } from 'node:module';
import { FastifyOtelInstrumentation } from '@fastify/otel';
import {
  context,
  createContextKey,
  INVALID_SPAN_CONTEXT,
  ROOT_CONTEXT,
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
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  NodeTracerProvider,
  ParentBasedSampler,
  SamplingDecision,
  TraceIdRatioBasedSampler,
  type Sampler,
} from '@opentelemetry/sdk-trace-node';
import { ATTR_SERVICE_NAME } from '@opentelemetry/semantic-conventions';
import type { FastifyInstance, onRequestHookHandler } from 'fastify';
import type { Config } from '../config.js';

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

type SamplerName = Config['OTEL_TRACES_SAMPLER'];

/** The sampler `OTEL_TRACES_SAMPLER` names, as the SDK builds it from the environment (config.ts validated both). */
function namedSampler(name: SamplerName, ratio: number): Sampler {
  const root = name.endsWith('always_on')
    ? new AlwaysOnSampler()
    : name.endsWith('always_off')
      ? new AlwaysOffSampler()
      : new TraceIdRatioBasedSampler(ratio);
  return name.startsWith('parentbased_') ? new ParentBasedSampler({ root }) : root;
}

/** The share of requests without a `traceparent` that the sampler traces. */
const rootRatio = (name: SamplerName, ratio: number) => (name.endsWith('always_on') ? 1 : name.endsWith('always_off') ? 0 : ratio);

/** Set on the context of a request found to be sampled before its span was asked for. */
const SAMPLED_REQUEST = createContextKey('pet-store sampled request');

/**
 * A request without a caller's `traceparent` is decided here, before any span is asked for: a
 * sampled one goes on in a context that says so, an unsampled one beneath a span that records
 * nothing, has no ids and is never exported, so `@fastify/otel` starts no request span for it
 * (its ignore check, below) and nothing beneath it asks the SDK. A request with a `traceparent`
 * is left to the SDK, which follows the caller's decision or decides by its trace id.
 */
function decideRequests(ratio: number): onRequestHookHandler {
  const sampled = ROOT_CONTEXT.setValue(SAMPLED_REQUEST, true);
  const unsampled = trace.setSpan(ROOT_CONTEXT, trace.wrapSpanContext(INVALID_SPAN_CONTEXT));
  return (request, _reply, done) => {
    if (request.headers.traceparent !== undefined) return done();
    context.with(Math.random() < ratio ? sampled : unsampled, done);
  };
}

/**
 * The named sampler, but a request decided above is sampled, and a span beneath one of this
 * process follows its parent (as every named sampler would: a trace is kept whole, or not at all).
 */
function followingRequestDecisions(named: Sampler): Sampler {
  return {
    shouldSample(ctx, ...rest) {
      const parent = trace.getSpanContext(ctx);
      if (parent && !parent.isRemote) {
        return { decision: parent.traceFlags & TraceFlags.SAMPLED ? SamplingDecision.RECORD_AND_SAMPLED : SamplingDecision.NOT_RECORD };
      }
      if (!parent && ctx.getValue(SAMPLED_REQUEST)) return { decision: SamplingDecision.RECORD_AND_SAMPLED };
      return named.shouldSample(ctx, ...rest);
    },
    toString: () => `FollowingRequestDecisions{${named.toString()}}`,
  };
}

/**
 * The OpenTelemetry SDK, loaded only when tracing is configured (tracing.ts): spans of each
 * request and its hooks and handler (@fastify/otel, registered on every Fastify instance as it is
 * created), of each PostgreSQL query (pg) and Redis command (ioredis), batched and sent as OTLP
 * over HTTP (protobuf is not needed: the exporter sends JSON).
 */
export function startSdk(options: { url: string; serviceName: string; sampler: SamplerName; ratio: number }): () => Promise<void> {
  const { url, serviceName, sampler, ratio } = options;
  // The app imports pg and ioredis as ES modules: import-in-the-middle's hook lets the
  // instrumentations patch them as they load (require-in-the-middle sees only require()).
  register('@opentelemetry/instrumentation/hook.mjs', import.meta.url);
  const provider = new NodeTracerProvider({
    resource: resourceFromAttributes({ [ATTR_SERVICE_NAME]: serviceName }),
    sampler: followingRequestDecisions(namedSampler(sampler, ratio)),
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url }))],
  });
  provider.register();
  // Subscribed before @fastify/otel is, so each Fastify instance's first onRequest hook decides,
  // ahead of the request span's (and not wrapped in a span of its own).
  const requestRatio = rootRatio(sampler, ratio);
  if (requestRatio < 1) {
    const decide = decideRequests(requestRatio);
    subscribe('fastify.initialization', (message) => (message as { fastify: FastifyInstance }).fastify.addHook('onRequest', decide));
  }
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
