import type { FastifyInstance } from 'fastify';

export interface HttpResponse {
  status: number;
  headers: Headers;
  // Tests read whatever JSON came back.
  body: any; // eslint-disable-line @typescript-eslint/no-explicit-any
}

/** Listens on a free loopback port and returns a client that speaks real HTTP to it, sending defaultHeaders. */
export async function listen(app: FastifyInstance, defaultHeaders: Record<string, string> = {}) {
  await app.listen({ port: 0, host: '127.0.0.1' });
  const address = app.server.address();
  const origin = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
  return async function request(
    method: string,
    path: string,
    { json, body, headers = {} }: { json?: unknown; body?: string; headers?: Record<string, string> } = {},
  ): Promise<HttpResponse> {
    const init: RequestInit = { method, headers: { ...defaultHeaders, ...headers } };
    if (json !== undefined) {
      init.body = JSON.stringify(json);
      init.headers = { 'content-type': 'application/json', ...defaultHeaders, ...headers };
    } else if (body !== undefined) {
      init.body = body;
    }
    const response = await fetch(origin + path, init);
    const text = await response.text();
    return { status: response.status, headers: response.headers, body: text ? JSON.parse(text) : undefined };
  };
}
