import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildTestApp, type TestApp } from './support/app.js';
import { eventually } from './support/eventually.js';
import { heapAfterGc } from './support/memory.js';

// Short deadlines so the test runs in seconds; production defaults are 10 s, 30 s and 60 s.
const HEADERS_TIMEOUT_MS = 1_000;
const REQUEST_TIMEOUT_MS = 2_000;
const IDLE_TIMEOUT_MS = 1_500;
const MAX_CONNECTIONS = 20;

let t: TestApp;
let port: number;
beforeAll(async () => {
  t = await buildTestApp({
    HEADERS_TIMEOUT_MS: String(HEADERS_TIMEOUT_MS),
    REQUEST_TIMEOUT_MS: String(REQUEST_TIMEOUT_MS),
    IDLE_TIMEOUT_MS: String(IDLE_TIMEOUT_MS),
    MAX_CONNECTIONS: String(MAX_CONNECTIONS),
  });
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  port = (t.app.server.address() as { port: number }).port;
});
afterAll(() => t.close());

/** A raw client socket that records what it receives and when the server closes it. */
async function open() {
  const socket = connect(port, '127.0.0.1');
  await new Promise((resolve) => socket.once('connect', resolve));
  const client = { socket, received: '', closedAt: undefined as number | undefined, openedAt: Date.now() };
  socket.on('data', (chunk: Buffer) => (client.received += chunk.toString()));
  socket.on('error', () => {});
  socket.on('close', () => (client.closedAt = Date.now()));
  return client;
}

const closed = (client: { socket: Socket; closedAt?: number }, withinMs: number) =>
  new Promise<boolean>((resolve) => {
    if (client.closedAt) return resolve(true);
    const timer = setTimeout(() => resolve(false), withinMs);
    client.socket.once('close', () => {
      clearTimeout(timer);
      resolve(true);
    });
  });

const drip = (socket: Socket, text: string, everyMs: number) => {
  let i = 0;
  const timer = setInterval(() => {
    if (i >= text.length || socket.destroyed) return clearInterval(timer);
    socket.write(text[i++]!);
  }, everyMs);
  return timer;
};

describe('slow and abusive clients', () => {
  it('cuts off a client that sends its headers slowly (slowloris)', async () => {
    const client = await open();
    client.socket.write('GET /v1/pets HTTP/1.1\r\nHost: x\r\n');
    const timer = drip(client.socket, 'X-Slow: ' + 'a'.repeat(1_000), 200);
    expect(await closed(client, HEADERS_TIMEOUT_MS + 4_000)).toBe(true);
    clearInterval(timer);
    expect(client.received).toMatch(/^HTTP\/1.1 408 /);
    expect(client.received).toContain('"code":"request_timeout"');
  });

  it('cuts off a client that sends its body slowly', async () => {
    const client = await open();
    const body = JSON.stringify({ name: 'Slow', categoryId: 1, padding: 'x'.repeat(2_000) });
    client.socket.write(
      `POST /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: ${t.auth.authorization}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`,
    );
    const timer = drip(client.socket, body, 100);
    expect(await closed(client, REQUEST_TIMEOUT_MS + 4_000)).toBe(true);
    clearInterval(timer);
    expect(client.closedAt! - client.openedAt).toBeLessThan(REQUEST_TIMEOUT_MS + 4_000);
    const stored = await t.db.query("SELECT 1 FROM pets WHERE name = 'Slow'");
    expect(stored).toHaveLength(0);
  });

  it('closes an idle connection that sends nothing', async () => {
    const client = await open();
    expect(await closed(client, IDLE_TIMEOUT_MS + 4_000)).toBe(true);
  });

  it('does not let a client that never reads its responses pin memory', async () => {
    for (let i = 0; i < 150; i++) {
      await t.app.inject({ method: 'POST', url: '/v1/pets', headers: t.auth, payload: { name: 'x'.repeat(200), categoryId: 1 } });
    }
    const before = heapAfterGc();
    const client = await open();
    client.socket.pause(); // never read
    const request = `GET /v1/pets?limit=100 HTTP/1.1\r\nHost: x\r\nAuthorization: ${t.auth.authorization}\r\n\r\n`;
    for (let i = 0; i < 2_000; i++) client.socket.write(request); // ~50 MB of responses if all were produced
    // The client reads nothing, so it cannot see the close; the server's own count shows it.
    const openConnections = () => new Promise<number>((resolve) => t.app.server.getConnections((_error, count) => resolve(count)));
    await eventually(async () => (await openConnections()) === 0, REQUEST_TIMEOUT_MS + IDLE_TIMEOUT_MS + 6_000);
    client.socket.destroy();
    // Requests already read may still be finishing; once they have, nothing of the client is kept.
    await eventually(async () => heapAfterGc() - before < 10 * 1024 * 1024, 10_000);
  });

  it('bounds the number of open connections', async () => {
    const clients = await Promise.all(Array.from({ length: MAX_CONNECTIONS + 10 }, () => open()));
    await new Promise((resolve) => setTimeout(resolve, 300));
    const refused = clients.filter((client) => client.closedAt !== undefined);
    expect(refused.length).toBeGreaterThanOrEqual(10);
    for (const client of clients) client.socket.destroy();
    await new Promise((resolve) => setTimeout(resolve, 300));
    // Capacity comes back once they are gone.
    const response = await fetch(`http://127.0.0.1:${port}/healthz`);
    expect(response.status).toBe(200);
  });
});
