import type { FastifyInstance } from 'fastify';
import type { AddressInfo } from 'node:net';

export interface HttpResponse {
  status: number;
  headers: Headers;
  // Tests read whatever JSON came back.
  body: any; // eslint-disable-line @typescript-eslint/no-explicit-any
}

/** The loopback port the app listens on, listening on a free one first unless it already does. */
export async function portOf(app: FastifyInstance): Promise<number> {
  if (!app.server.listening) await app.listen({ port: 0, host: '127.0.0.1' });
  return (app.server.address() as AddressInfo).port;
}

/** A client that speaks real HTTP to the app on a loopback port (see portOf), sending defaultHeaders. */
export async function listen(app: FastifyInstance, defaultHeaders: Record<string, string> = {}) {
  const origin = `http://127.0.0.1:${await portOf(app)}`;
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
