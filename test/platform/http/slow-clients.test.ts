import type { Socket } from 'node:net';
import { describe, expect } from 'vitest';
import { eventually } from '../../support/eventually.js';
import { appTest } from '../../support/fixtures.js';
import { heapAfterGc } from '../../support/memory.js';
import { closedWithin, openSocket } from '../../support/raw-socket.js';

// Short deadlines so the test runs in seconds; production defaults are 10 s, 30 s and 60 s.
const HEADERS_TIMEOUT_MS = 1_000;
const REQUEST_TIMEOUT_MS = 2_000;
const IDLE_TIMEOUT_MS = 1_500;
const MAX_CONNECTIONS = 20;

const test = appTest({
  env: {
    HEADERS_TIMEOUT_MS: String(HEADERS_TIMEOUT_MS),
    REQUEST_TIMEOUT_MS: String(REQUEST_TIMEOUT_MS),
    IDLE_TIMEOUT_MS: String(IDLE_TIMEOUT_MS),
    MAX_CONNECTIONS: String(MAX_CONNECTIONS),
  },
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
  test('cuts off a client that sends its headers slowly (slowloris)', async ({ port }) => {
    const client = await openSocket(port);
    client.socket.write('GET /v1/pets HTTP/1.1\r\nHost: x\r\n');
    const timer = drip(client.socket, 'X-Slow: ' + 'a'.repeat(1_000), 200);
    expect(await closedWithin(client, HEADERS_TIMEOUT_MS + 4_000)).toBe(true);
    clearInterval(timer);
    expect(client.received).toMatch(/^HTTP\/1.1 408 /);
    expect(client.received).toContain('"code":"request_timeout"');
  });

  test('cuts off a client that sends its body slowly', async ({ t, port }) => {
    const client = await openSocket(port);
    const body = JSON.stringify({ name: 'Slow', categoryId: 1, padding: 'x'.repeat(2_000) });
    client.socket.write(
      `POST /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: ${t.auth.authorization}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`,
    );
    const timer = drip(client.socket, body, 100);
    expect(await closedWithin(client, REQUEST_TIMEOUT_MS + 4_000)).toBe(true);
    clearInterval(timer);
    expect(client.closedAt! - client.openedAt).toBeLessThan(REQUEST_TIMEOUT_MS + 4_000);
    const stored = await t.db.query("SELECT 1 FROM pets WHERE name = 'Slow'");
    expect(stored).toHaveLength(0);
  });

  test('closes an idle connection that sends nothing', async ({ port }) => {
    const client = await openSocket(port);
    expect(await closedWithin(client, IDLE_TIMEOUT_MS + 4_000)).toBe(true);
  });

  test('does not let a client that never reads its responses pin memory', async ({ t, port }) => {
    for (let i = 0; i < 150; i++) {
      await t.app.inject({ method: 'POST', url: '/v1/pets', headers: t.auth, payload: { name: 'x'.repeat(200), categoryId: 1 } });
    }
    const before = heapAfterGc();
    const client = await openSocket(port);
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

  test('bounds the number of open connections', async ({ port }) => {
    const clients = await Promise.all(Array.from({ length: MAX_CONNECTIONS + 10 }, () => openSocket(port)));
    const refused = () => clients.filter((client) => client.closedAt !== undefined).length;
    await eventually(async () => refused() >= 10);
    for (const client of clients) client.socket.destroy();
    // Capacity comes back once they are gone.
    const healthz = () =>
      fetch(`http://127.0.0.1:${port}/healthz`).then(
        (response) => response.status,
        () => 0,
      );
    await eventually(async () => (await healthz()) === 200);
  });
});
