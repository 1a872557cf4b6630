import { subscribe } from 'node:diagnostics_channel';
import { register } from 'node:module';
import proxyAddr from '@fastify/proxy-addr';
import {
  context,
  createContextKey,
  INVALID_SPAN_CONTEXT,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
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
import {
  ATTR_ERROR_TYPE,
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
  ATTR_HTTP_ROUTE,
  ATTR_SERVICE_NAME,
  ATTR_URL_PATH,
  ATTR_URL_SCHEME,
} from '@opentelemetry/semantic-conventions';
import type { FastifyInstance, FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify';
import type { SettingValues } from '../config/parsers.js';
import type { tracing } from '../config/settings/observability.js';

/**
 * Requests that are not worth a trace: probes, scraped every few seconds (and the metrics server's
 * one route), with or without a query: no split, on every request.
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
 * costs its queries and commands no new span, ids, attributes or sampling decision.
 * A remote parent (a trusted caller's `traceparent`) still gets its decision. The pg and ioredis
 * instrumentations have no option for this (docs/decisions/unsampled-spans.md).
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

type SamplerName = SettingValues<typeof tracing>['OTEL_TRACES_SAMPLER'];

/** The sampler `OTEL_TRACES_SAMPLER` names, as the SDK builds it from the environment (the configuration's schema checked both). */
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

const SERVER_SPAN: SpanOptions = { kind: SpanKind.SERVER };

/** Each sampled request's span while it is open, for the facts the concerns that decide them name (annotate). */
/** What a concern decides of a request that its trace's span names (docs/decisions/request-spans.md). */
export interface RequestFacts {
  /** The id of the API key the request was made with. */
  keyId?: number;
  /** The rate limiter's decision: an outcome rate_limit_decisions_total counts. */
  rateLimitOutcome?: string;
}

const requestSpans = new WeakMap<FastifyRequest, Span>();

/** The span attribute of each fact, in the service's namespace: HTTP's conventions define none of them. */
const FACT_ATTRIBUTES: Record<keyof RequestFacts, string> = {
  keyId: 'pet_store.api_key.id',
  rateLimitOutcome: 'pet_store.rate_limit.outcome',
};

/** Sets a sampled request's facts on its span; an unsampled request has none to find. */
function annotate(request: FastifyRequest, facts: RequestFacts) {
  const span = requestSpans.get(request);
  if (!span) return;
  for (const fact of Object.keys(facts) as Array<keyof RequestFacts>) {
    const value = facts[fact];
    if (value !== undefined) span.setAttribute(FACT_ATTRIBUTES[fact], value);
  }
}

/**
 * A request's one span (docs/decisions/request-spans.md), decided here, before anything asks for a
 * span: by a draw at the ratio, so a caller cannot choose it, neither by a `traceparent`'s sampled
 * flag nor by a trace id the SDK's ratio sampler would take. A sampled request's span continues the
 * caller's trace, if it sent one, and its queries and commands are its children; an unsampled one
 * goes on beneath a span that records nothing and is never exported (the caller's trace id and span
 * id, for its log lines, or none), so nothing beneath it asks the SDK. Only a `traceparent` from a
 * trusted parent (TRACING_TRUSTED_PARENTS, the connection's peer) is left to the SDK, which follows
 * the caller's decision or decides by its trace id.
 */
function traceRequests(tracer: Tracer, ratio: number, trustedParents: string[]): onRequestHookHandler {
  const trusted = trustedParents.length > 0 ? proxyAddr.compile(trustedParents) : () => false;
  const sampled = ROOT_CONTEXT.setValue(SAMPLED_REQUEST, true);
  const unsampled = trace.setSpan(ROOT_CONTEXT, trace.wrapSpanContext(INVALID_SPAN_CONTEXT));
  return (request, reply, done) => {
    if (UNTRACED.test(request.url)) return done();
    const continued = request.headers.traceparent !== undefined;
    let parent: Context;
    if (continued && trusted(request.socket.remoteAddress ?? '', 0)) parent = propagation.extract(ROOT_CONTEXT, request.headers);
    else if (Math.random() < ratio) parent = continued ? propagation.extract(sampled, request.headers) : sampled;
    else return context.with(continued ? unsampledContinuing(request.headers) : unsampled, done);
    const span = tracer.startSpan(request.method, SERVER_SPAN, parent);
    // At the response's 'close' (once), not onResponse: it comes too when the client left before
    // the answer, whose 'finish' (and onResponse) never does.
    if (span.isRecording()) {
      requestSpans.set(request, span);
      reply.raw.on('close', () => endRequestSpan(span, request, reply));
    }
    context.with(trace.setSpan(parent, span), done);
  };
}

/**
 * A request's span ends with HTTP's semantic conventions' attributes (a 5xx is an error; a request
 * whose client left before its answer has no status code) and the request id; the key and the
 * limiter's decision were set by auth and the limiter as they decided them (annotate).
 */
function endRequestSpan(span: Span, request: FastifyRequest, reply: FastifyReply) {
  const { method, url } = request;
  const route = request.routeOptions.url;
  const query = url.indexOf('?');
  span.setAttribute(ATTR_HTTP_REQUEST_METHOD, method);
  span.setAttribute(ATTR_URL_SCHEME, request.protocol);
  span.setAttribute(ATTR_URL_PATH, query === -1 ? url : url.slice(0, query));
  if (route !== undefined) {
    span.setAttribute(ATTR_HTTP_ROUTE, route);
    span.updateName(`${method} ${route}`);
  }
  if (reply.raw.writableFinished) {
    span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, reply.statusCode);
    if (reply.statusCode >= 500) {
      span.setAttribute(ATTR_ERROR_TYPE, String(reply.statusCode));
      span.setStatus({ code: SpanStatusCode.ERROR });
    }
  } else {
    span.setAttribute(ATTR_ERROR_TYPE, 'client_closed');
  }
  span.setAttribute('pet_store.request.id', request.id);
  requestSpans.delete(request);
  span.end();
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
 * The OpenTelemetry SDK, loaded only when tracing is configured (tracing.ts): a span of each request
 * (traceRequests, added to every Fastify instance as it is created), and beneath it a span of each
 * PostgreSQL query (pg) and Redis command (ioredis) it makes, batched (the SDK's batch processor, its
 * OTEL_BSP_* settings) and sent as OTLP over HTTP (protobuf is not needed: the exporter sends JSON).
 */
export function startSdk(options: { url: string; serviceName: string; sampler: SamplerName; ratio: number; trustedParents: string[] }): {
  stop: () => Promise<void>;
  annotate: typeof annotate;
} {
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
  // Each Fastify instance's first onRequest hook, ahead of every other.
  const traced = traceRequests(provider.getTracer('pet-store'), rootRatio(sampler, ratio), trustedParents);
  subscribe('fastify.initialization', (message) => (message as { fastify: FastifyInstance }).fastify.addHook('onRequest', traced));
  // A query or command outside a request (timers, notices, a batch another request started) is no trace of its own.
  const requestsOnly = { requireParentSpan: true };
  registerInstrumentations({
    tracerProvider: skipBeneathUnsampled(provider),
    instrumentations: [
      // The queries alone: a pool's checkout is no query.
      new PgInstrumentation({ ...requestsOnly, ignoreConnectSpans: true }),
      // The command alone: its keys and arguments name key ids and, for anonymous callers, client addresses.
      new IORedisInstrumentation({ ...requestsOnly, dbStatementSerializer: (command) => command }),
    ],
  });
  return { stop: () => provider.shutdown(), annotate };
}
