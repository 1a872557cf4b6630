import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { afterEach, expect } from 'vitest';
import type { FastifyInstance } from 'fastify';
import type { ApiKeyIdentity } from '../../src/api-keys/identity.js';
import { buildTestApp } from './app.js';
import { DAY, T0, type TestClock } from './time.js';

// What the webhooks' tests share: a receiver of the events, the settings, and what the outbox holds.

/** The secret the tests sign with, as WEBHOOK_SECRET. */
export const SECRET = 'whsec_0123456789abcdef0123456789abcdef';

export interface Received {
  body: string;
  signature: string;
  headers: Record<string, string | string[] | undefined>;
}

/**
 * A receiver of the events on a port of its own: answers each POST as `answer` says (when it says),
 * and keeps what came; `arrived(count)` resolves once that many have come, however long it takes.
 */
export async function startReceiver(answer: (index: number) => number | Promise<number>, port = 0) {
  const received: Received[] = [];
  const waiting: Array<{ count: number; resolve: () => void }> = [];
  const server: Server = createServer((request, response) => {
    let body = '';
    request.setEncoding('utf8');
    request.on('data', (chunk: string) => (body += chunk));
    request.on('end', () => {
      received.push({ body, signature: String(request.headers['pet-store-signature']), headers: request.headers });
      for (const { count, resolve } of waiting) if (received.length >= count) resolve();
      void Promise.resolve(answer(received.length - 1)).then((status) => response.writeHead(status).end());
    });
  });
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  const address = server.address() as { port: number };
  return {
    received,
    arrived: (count: number) =>
      received.length >= count ? Promise.resolve() : new Promise<void>((resolve) => void waiting.push({ count, resolve })),
    url: `http://127.0.0.1:${address.port}/hooks`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** What a receiver does with the header (docs/admin-api.md): the HMAC of "<t>.<body>" with the secret, compared in constant time. */
export function verified({ body, signature }: Received): boolean {
  const { t, v1 } = Object.fromEntries(signature.split(',').map((part) => part.split('='))) as { t: string; v1: string };
  const expected = createHmac('sha256', SECRET).update(`${t}.${body}`).digest();
  return Math.abs(Date.now() / 1000 - Number(t)) < 300 && timingSafeEqual(expected, Buffer.from(v1, 'hex'));
}

export const webhookEnv = (url: string, extra: Record<string, string> = {}) => ({
  WEBHOOK_URL: url,
  WEBHOOK_SECRET: SECRET,
  WEBHOOK_USAGE_THRESHOLDS: '100',
  ...extra,
});

/** The test's clock, and a first retry after a second where production waits five. */
export const depsOf = (clock: TestClock) => ({ now: clock.now, webhookFirstRetryMs: 1_000 });

/** Spends a key's minute (2 requests) on the app: its window crosses 100%. */
export async function crossMinute(app: FastifyInstance, headers: { authorization: string }) {
  for (let i = 0; i < 2; i++) expect((await app.inject({ url: '/v1/pets?limit=1', headers })).statusCode).toBe(200);
}

/** The attempts' outcomes so far (webhook_deliveries_total), by outcome. */
export const outcomesOf = async (app: FastifyInstance) => {
  const counted = (await app.metricsRegistry.getSingleMetric('webhook_deliveries_total')!.get()).values;
  return { delivered: 0, retried: 0, failed: 0, ...Object.fromEntries(counted.map(({ labels, value }) => [labels.outcome, value])) };
};

export const deliveriesOf = async (app: FastifyInstance) =>
  app.db.query<{ id: number; state: string; attempts: number; event_id: string; last_error: string | null }>(
    'SELECT id, state, attempts, event_id, last_error FROM webhook_deliveries ORDER BY id',
  );

/**
 * What each test of the block opens (`closing`: apps, receivers, admin clients), closed after it,
 * the last opened first: apps kept to the end of the file held PostgreSQL's connections (10 each)
 * until the server, shared with another file's instances, had none left. `open` builds an app with
 * the webhook settings given on the test's clock, to be closed so.
 */
export function closedAfterEach() {
  const closing: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    for (const close of closing.splice(0).reverse()) await close();
  });
  const open = async (env: Record<string, string>, clock: TestClock) => {
    const t = await buildTestApp(env, depsOf(clock));
    closing.push(() => t.close());
    return t;
  };
  return { closing, open };
}

/** A usage crossing of a day's 80% of a key's quota (a key the outbox needs nothing else of): to record an event without requests. */
export const DAY_CROSSING = {
  key: { id: 7, quotaId: 7, plan: 'pro' } as ApiKeyIdentity,
  window: 'day',
  windowStart: T0,
  limit: 100,
  used: 80,
  threshold: 80,
  resetAt: T0 + DAY,
} as const;
