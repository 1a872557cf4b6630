import { subscribe } from 'node:diagnostics_channel';
import { register } from 'node:module';
import { FastifyOtelInstrumentation } from '@fastify/otel';
import proxyAddr from '@fastify/proxy-addr';
import {
  context,
  createContextKey,
  INVALID_SPAN_CONTEXT,
  propagation,
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
 * A remote parent (a trusted caller's `traceparent`) still gets its decision. @fastify/otel and the pg and
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

/** The share of requests the sampler traces (of those without a trusted caller's `traceparent`). */
const rootRatio = (name: SamplerName, ratio: number) => (name.endsWith('always_on') ? 1 : name.endsWith('always_off') ? 0 : ratio);

/** Set on the context of a request found to be sampled before its span was asked for. */
const SAMPLED_REQUEST = createContextKey('pet-store sampled request');

/**
 * A request is decided here, before any span is asked for, by a draw at the ratio: a caller cannot
 * choose it, neither by a `traceparent`'s sampled flag nor by a trace id the SDK's ratio sampler
 * would take. A sampled one goes on in a context that says so (its request span still continues
 * the caller's trace); an unsampled one beneath a span that records nothing and is never exported
 * (the caller's trace id and span id, for its log lines, or none), so `@fastify/otel` starts no
 * request span for it (its ignore check, below) and nothing beneath it asks the SDK. Only a
 * `traceparent` from a trusted parent (TRACING_TRUSTED_PARENTS, the connection's peer) is left to
 * the SDK, which follows the caller's decision or decides by its trace id.
 */
function decideRequests(ratio: number, trustedParents: string[]): onRequestHookHandler {
  const trusted = trustedParents.length > 0 ? proxyAddr.compile(trustedParents) : () => false;
  const sampled = ROOT_CONTEXT.setValue(SAMPLED_REQUEST, true);
  const unsampled = trace.setSpan(ROOT_CONTEXT, trace.wrapSpanContext(INVALID_SPAN_CONTEXT));
  return (request, _reply, done) => {
    const continued = request.headers.traceparent !== undefined;
    if (continued && trusted(request.socket.remoteAddress ?? '', 0)) return done();
    if (Math.random() < ratio) return context.with(sampled, done);
    context.with(continued ? unsampledContinuing(request.headers) : unsampled, done);
  };
}

/** An unsampled span of this process in the caller's trace: its log lines name the trace, nothing is recorded. */
function unsampledContinuing(headers: Record<string, unknown>): Context {
  const caller = trace.getSpanContext(propagation.extract(ROOT_CONTEXT, headers));
  const local = caller ? { ...caller, isRemote: false, traceFlags: TraceFlags.NONE } : INVALID_SPAN_CONTEXT;
  return trace.setSpan(ROOT_CONTEXT, trace.wrapSpanContext(local));
}

/**
 * The named sampler, but a request decided above is sampled (beneath a caller's span, if it sent
 * one), and a span beneath one of this process follows its parent (as every named sampler would:
 * a trace is kept whole, or not at all).
 */
function followingRequestDecisions(named: Sampler): Sampler {
  return {
    shouldSample(ctx, ...rest) {
      const parent = trace.getSpanContext(ctx);
      if (parent && !parent.isRemote) {
        return { decision: parent.traceFlags & TraceFlags.SAMPLED ? SamplingDecision.RECORD_AND_SAMPLED : SamplingDecision.NOT_RECORD };
      }
      if (ctx.getValue(SAMPLED_REQUEST)) return { decision: SamplingDecision.RECORD_AND_SAMPLED };
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
export function startSdk(options: {
  url: string;
  serviceName: string;
  sampler: SamplerName;
  ratio: number;
  trustedParents: string[];
}): () => Promise<void> {
  const { url, serviceName, sampler, ratio, trustedParents } = options;
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
  const decide = decideRequests(rootRatio(sampler, ratio), trustedParents);
  subscribe('fastify.initialization', (message) => (message as { fastify: FastifyInstance }).fastify.addHook('onRequest', decide));
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
