/**
 * Preloaded (`--import`) into a traced server by test/platform/observability/tracing.test.ts: counts the spans the
 * tracing SDK is asked to start (where ids, attributes and the sampling decision are made), by
 * where their parent is, and prints the counts as the process exits.
 */
import { writeSync } from 'node:fs';
import { context, trace, type Context, type SpanOptions, type Tracer } from '@opentelemetry/api';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';

export interface StartedSpans {
  /** The names of spans without a parent: a request's own (`request`), and the work of no request (timers, notices). */
  roots: string[];
  /** Spans whose parent came in a `traceparent` header. */
  remoteParent: number;
  /** The names of spans started beneath another span of this process. */
  localParent: string[];
}

const started: StartedSpans = { roots: [], remoteParent: 0, localParent: [] };
const counted = new WeakSet<Tracer>();
// eslint-disable-next-line @typescript-eslint/unbound-method -- called with its provider as this
const getTracer = NodeTracerProvider.prototype.getTracer;
NodeTracerProvider.prototype.getTracer = function (...args) {
  const tracer = getTracer.apply(this, args);
  if (counted.has(tracer)) return tracer;
  counted.add(tracer);
  // eslint-disable-next-line @typescript-eslint/unbound-method -- called with its tracer as this
  const startSpan = tracer.startSpan;
  tracer.startSpan = function (name: string, options?: SpanOptions, ctx: Context = context.active()) {
    const parent = options?.root ? undefined : trace.getSpan(ctx);
    if (!parent) started.roots.push(name);
    else if (parent.spanContext().isRemote) started.remoteParent++;
    else started.localParent.push(name);
    return startSpan.call(this, name, options, ctx);
  };
  return tracer;
};

process.on('exit', () => writeSync(1, `${JSON.stringify({ startedSpans: started })}\n`));
