import type { FastifyRequest } from 'fastify';
import type { SettingValues } from '../config/parsers.js';
import type { tracing } from '../config/settings/observability.js';
// Types only: the SDK's module itself is imported by startTracing, and only when tracing is on.
import type { RequestFacts } from './tracing-sdk.js';

/** The tracing settings, TRACING_TRUSTED_PARENTS parsed into its addresses and CIDRs. */
type TracingSettings = Omit<SettingValues<typeof tracing>, 'TRACING_TRUSTED_PARENTS'> & { tracingTrustedParents: string[] };

/**
 * Where spans are sent (OTLP over HTTP), by the OTLP exporter specification's rule: the traces
 * endpoint as given, else the general endpoint with `/v1/traces` appended; neither set, no tracing.
 */
export function tracesEndpoint(config: Pick<TracingSettings, 'OTEL_EXPORTER_OTLP_ENDPOINT' | 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT'>) {
  if (config.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) return config.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT;
  if (config.OTEL_EXPORTER_OTLP_ENDPOINT) return `${config.OTEL_EXPORTER_OTLP_ENDPOINT.replace(/\/+$/, '')}/v1/traces`;
  return undefined;
}

let stop: (() => Promise<void>) | undefined;
let annotate: ((request: FastifyRequest, facts: RequestFacts) => void) | undefined;

/**
 * Names a fact of the request on its span, as the concern that decides it does so: nothing when
 * tracing is off or the request is not sampled (then only a lookup that finds no span).
 */
export function annotateRequestSpan(request: FastifyRequest, facts: RequestFacts): void {
  annotate?.(request, facts);
}

/**
 * Starts tracing when an endpoint is configured; otherwise does nothing and loads nothing (the
 * SDK is imported only here, behind the check). Must run before the modules of the app are
 * imported (server.ts imports app.js after it): pg and ioredis are instrumented as they load.
 */
export async function startTracing(config: TracingSettings): Promise<void> {
  const url = tracesEndpoint(config);
  if (!url || stop) return;
  const { startSdk } = await import('./tracing-sdk.js');
  ({ stop, annotate } = startSdk({
    url,
    serviceName: config.OTEL_SERVICE_NAME,
    sampler: config.OTEL_TRACES_SAMPLER,
    ratio: config.OTEL_TRACES_SAMPLER_ARG,
    trustedParents: config.tracingTrustedParents,
  }));
}

/** Sends the spans still buffered and stops; the app calls it when it closes. */
export async function stopTracing(): Promise<void> {
  const stopping = stop;
  stop = undefined;
  await stopping?.();
}

/**
 * A pino mixin that adds the active span's `trace_id` and `span_id` to each log line written
 * within a traced request (the OpenTelemetry log data model's names), so a log line leads to its
 * trace: sampled, or with a caller's `traceparent`. An unsampled request of ours has no ids to
 * name. Only when tracing is configured: otherwise the OpenTelemetry API is not even loaded.
 */
export async function traceLogMixin(config: TracingSettings): Promise<(() => object) | undefined> {
  if (!tracesEndpoint(config)) return undefined;
  const { isSpanContextValid, trace } = await import('@opentelemetry/api');
  return () => {
    const spanContext = trace.getActiveSpan()?.spanContext();
    if (!spanContext || !isSpanContextValid(spanContext)) return {};
    return { trace_id: spanContext.traceId, span_id: spanContext.spanId };
  };
}
