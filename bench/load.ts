import autocannon from 'autocannon';

/** One request: fixed, or with a path or headers made afresh each time it is sent. */
export interface RequestSpec {
  method: 'GET' | 'POST';
  /** The path sent; with freshPath, only an example of it (what a preflight may send). */
  path: string;
  headers?: Record<string, string>;
  body?: string;
  /** A path made afresh for every request (a random page): a string template, a few µs of the load generator. */
  freshPath?: () => string;
  /** Headers made afresh for every request (random keys); costs the load generator a little CPU. */
  freshHeaders?: () => Record<string, string>;
}

/**
 * What every connection sends, over and over: one request, or several in order (autocannon cycles
 * each connection's list, so `[GET x 9, POST]` is nine GETs then a POST, per connection, repeated).
 */
export type RequestShape = RequestSpec | RequestSpec[];

export const requestsOf = (shape: RequestShape): RequestSpec[] => (Array.isArray(shape) ? shape : [shape]);

/** The request as it is sent once: its fresh path and headers drawn. */
export function drawRequest(request: RequestSpec): { method: string; path: string; headers: Record<string, string>; body?: string } {
  return {
    method: request.method,
    path: request.freshPath?.() ?? request.path,
    headers: { ...request.headers, ...request.freshHeaders?.() },
    body: request.body,
  };
}

/** Either a duration or a number of requests. */
export type LoadLength = { seconds: number } | { requests: number };

export interface Measurement {
  /** Responses received, whatever their status. */
  responses: number;
  seconds: number;
  requestsPerSecond: number;
  p50Ms: number;
  p99Ms: number;
  /** Responses by HTTP status. */
  statuses: Record<string, number>;
  non2xx: number;
  /** Requests that got no response: connection errors and timeouts. */
  failed: number;
}

/** autocannon's request; a fixed one is built once per connection, one with setupRequest for every send. */
function toAutocannon(request: RequestSpec): autocannon.Request {
  const { freshPath, freshHeaders } = request;
  const fixed = { method: request.method, path: request.path, headers: request.headers, body: request.body };
  if (!freshPath && !freshHeaders) return fixed;
  return {
    ...fixed,
    // autocannon hands over a copy of its own for each send, so it may be changed in place.
    setupRequest: (sent) => {
      if (freshPath) sent.path = freshPath();
      if (freshHeaders) sent.headers = { ...sent.headers, ...freshHeaders() };
      return sent;
    },
  };
}

/** Runs autocannon in this process against a server in another one. */
export async function load(origin: string, shape: RequestShape, connections: number, length: LoadLength): Promise<Measurement> {
  const result = await autocannon({
    url: origin,
    connections,
    // autocannon checks for the end of a run only at each sample tick (1 s by default), which would
    // stretch short smoke runs; the per-second request histogram this also shapes is not used.
    sampleInt: 100,
    ...('seconds' in length ? { duration: length.seconds } : { amount: length.requests }),
    requests: requestsOf(shape).map(toAutocannon),
  });
  const statuses = Object.fromEntries(Object.entries(result.statusCodeStats ?? {}).map(([status, stats]) => [status, stats.count ?? 0]));
  const responses = Object.values(statuses).reduce((sum, count) => sum + count, 0);
  return {
    responses,
    seconds: result.duration,
    // Counted from the whole run rather than autocannon's per-second samples, which drop the last partial second.
    requestsPerSecond: responses / result.duration,
    p50Ms: result.latency.p50,
    p99Ms: result.latency.p99,
    statuses,
    non2xx: result.non2xx,
    failed: result.errors + result.timeouts,
  };
}
