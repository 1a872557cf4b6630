import autocannon from 'autocannon';

/** One kind of request, sent over and over. */
export interface RequestShape {
  method: 'GET' | 'POST';
  path: string;
  headers?: Record<string, string>;
  body?: string;
  /** Headers made afresh for every request (random keys); costs the load generator a little CPU. */
  freshHeaders?: () => Record<string, string>;
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

/** Runs autocannon in this process against a server in another one. */
export async function load(origin: string, shape: RequestShape, connections: number, length: LoadLength): Promise<Measurement> {
  const { freshHeaders } = shape;
  const result = await autocannon({
    url: origin,
    connections,
    // autocannon checks for the end of a run only at each sample tick (1 s by default), which would
    // stretch short smoke runs; the per-second request histogram this also shapes is not used.
    sampleInt: 100,
    ...('seconds' in length ? { duration: length.seconds } : { amount: length.requests }),
    requests: [
      {
        method: shape.method,
        path: shape.path,
        headers: shape.headers,
        body: shape.body,
        ...(freshHeaders && { setupRequest: (request) => ({ ...request, headers: { ...request.headers, ...freshHeaders() } }) }),
      },
    ],
  });
  const statuses = Object.fromEntries(
    Object.entries(result.statusCodeStats ?? {}).map(([status, stats]) => [status, stats.count ?? 0]),
  );
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
