import { createHmac, timingSafeEqual } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import type { ApiKeyIdentity } from '../../src/api-keys/identity.js';
import { loadConfig } from '../../src/config/load.js';
import { keyBanned, usageThreshold } from '../../src/webhooks/events.js';
import { createWebhookDeliveriesRepository } from '../../src/webhooks/repository.js';
import { FIRST_RETRY_MS } from '../../src/webhooks/sender.js';
import { createKey, openAdmin } from '../support/admin.js';
import { buildTestApp, type TestApp } from '../support/app.js';
import { POSTGRES_URL } from '../support/databases.js';
import { eventually } from '../support/eventually.js';
import { freePort } from '../../harness/free-port.js';
import { bearer, keyInFreshWindows, waitForKey } from '../support/keys.js';
import { DAY, MINUTE, T0, testClock, type TestClock } from '../support/time.js';

const SECRET = 'whsec_0123456789abcdef0123456789abcdef';

interface Received {
  body: string;
  signature: string;
  headers: Record<string, string | string[] | undefined>;
}

/**
 * A receiver of the events on a port of its own: answers each POST as `answer` says (when it says),
 * and keeps what came; `arrived(count)` resolves once that many have come, however long it takes.
 */
async function startReceiver(answer: (index: number) => number | Promise<number>, port = 0) {
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
function verified({ body, signature }: Received): boolean {
  const { t, v1 } = Object.fromEntries(signature.split(',').map((part) => part.split('='))) as { t: string; v1: string };
  const expected = createHmac('sha256', SECRET).update(`${t}.${body}`).digest();
  return Math.abs(Date.now() / 1000 - Number(t)) < 300 && timingSafeEqual(expected, Buffer.from(v1, 'hex'));
}

const webhookEnv = (url: string, extra: Record<string, string> = {}) => ({
  WEBHOOK_URL: url,
  WEBHOOK_SECRET: SECRET,
  WEBHOOK_USAGE_THRESHOLDS: '100',
  ...extra,
});

/** The test's clock, and a first retry after a second where production waits five. */
const depsOf = (clock: TestClock) => ({ now: clock.now, webhookFirstRetryMs: 1_000 });

/** Spends a key's minute (2 requests) on the app: its window crosses 100%. */
async function crossMinute(app: FastifyInstance, headers: { authorization: string }) {
  for (let i = 0; i < 2; i++) expect((await app.inject({ url: '/v1/pets?limit=1', headers })).statusCode).toBe(200);
}

/** Adds `count` deliveries in `state`, recorded at `recordedAt` (the outbox's own clock is the database's), labelled in their dedupe keys. */
async function addDeliveries(
  app: FastifyInstance,
  { state, count, recordedAt, label }: { state: string; count: number; recordedAt: number; label: string },
) {
  // A pending one's next attempt is far off, so that no sender attempts it meanwhile.
  await app.db.query(
    `INSERT INTO webhook_deliveries (event_id, type, dedupe_key, body, state, created_at, next_attempt_at)
     SELECT gen_random_uuid(), 'usage.threshold', $1 || i, '{}', $2, $3, now() + interval '1 day' FROM generate_series(1, $4::int) AS i`,
    [`${label} `, state, new Date(recordedAt), count],
  );
}

const dedupeKeysOf = async (app: FastifyInstance) =>
  (await app.db.query<{ dedupe_key: string }>('SELECT dedupe_key FROM webhook_deliveries ORDER BY dedupe_key')).map(
    (row) => row.dedupe_key,
  );

/** The deliveries each prune deleted, as the app logged them. */
const prunedOf = (t: TestApp) =>
  t.logs
    .entries()
    .filter((entry) => entry.msg === 'webhooks: deliveries past their retention deleted')
    .map((entry) => entry.pruned as number);

/** The attempts' outcomes so far (webhook_deliveries_total), by outcome. */
const outcomesOf = async (app: FastifyInstance) => {
  const counted = (await app.metricsRegistry.getSingleMetric('webhook_deliveries_total')!.get()).values;
  return { delivered: 0, retried: 0, failed: 0, ...Object.fromEntries(counted.map(({ labels, value }) => [labels.outcome, value])) };
};

const deliveriesOf = async (app: FastifyInstance) =>
  app.db.query<{ id: number; state: string; attempts: number; event_id: string; last_error: string | null }>(
    'SELECT id, state, attempts, event_id, last_error FROM webhook_deliveries ORDER BY id',
  );

describe('webhook settings', () => {
  it('WEBHOOK_URL needs WEBHOOK_SECRET of 32 characters or more, which no error repeats; thresholds are ascending percentages', () => {
    expect(loadConfig({}).webhooks).toBeUndefined();
    expect(loadConfig(webhookEnv('https://hooks.example.test/x')).webhooks).toEqual({
      url: 'https://hooks.example.test/x',
      authorization: undefined,
      secret: SECRET,
      usageThresholds: [100],
    });
    expect(loadConfig({ WEBHOOK_URL: 'https://h.example.test', WEBHOOK_SECRET: SECRET }).webhooks?.usageThresholds).toEqual([80, 100]);
    expect(() => loadConfig(webhookEnv('https://h.example.test', { WEBHOOK_RETENTION_DAYS: '0' }))).toThrow('WEBHOOK_RETENTION_DAYS');
    expect(() => loadConfig({ WEBHOOK_URL: 'https://hooks.example.test/x' })).toThrow('WEBHOOK_URL and WEBHOOK_SECRET go together');
    expect(() => loadConfig({ WEBHOOK_SECRET: SECRET })).toThrow('WEBHOOK_URL and WEBHOOK_SECRET go together');
    const short = 'too-short-a-secret';
    expect(() => loadConfig({ WEBHOOK_URL: 'https://h.example.test', WEBHOOK_SECRET: short })).toThrow('Invalid WEBHOOK_SECRET=***');
    expect(() => loadConfig({ WEBHOOK_URL: 'https://h.example.test', WEBHOOK_SECRET: short })).not.toThrow(short);
    expect(() => loadConfig({ WEBHOOK_URL: 'ftp://h.example.test', WEBHOOK_SECRET: SECRET })).toThrow('WEBHOOK_URL');
    expect(() => loadConfig({ WEBHOOK_URL: 'https://h[ooks.example.test', WEBHOOK_SECRET: SECRET })).toThrow(
      'Invalid WEBHOOK_URL="https://h[ooks.example.test": not a URL',
    );
    // A user and password become Basic authentication, %-escapes decoded, and leave the URL.
    expect(loadConfig(webhookEnv('https://hooks:s3c%40ret@hooks.example.test/x?a=1')).webhooks).toMatchObject({
      url: 'https://hooks.example.test/x?a=1',
      authorization: `Basic ${Buffer.from('hooks:s3c@ret').toString('base64')}`,
    });
    expect(loadConfig(webhookEnv('https://:s3cret@hooks.example.test/')).webhooks?.authorization).toBe(
      `Basic ${Buffer.from(':s3cret').toString('base64')}`,
    );
    expect(() => loadConfig(webhookEnv('https://hooks:s3c%ret@hooks.example.test/x'))).toThrow(
      'Invalid WEBHOOK_URL="https://hooks:***@hooks.example.test/x": its user or password holds a % that starts no %-escape',
    );
    for (const thresholds of ['100,80', '0,50', '80,80', '101', '80;100']) {
      expect(() =>
        loadConfig({ WEBHOOK_URL: 'https://h.example.test', WEBHOOK_SECRET: SECRET, WEBHOOK_USAGE_THRESHOLDS: thresholds }),
      ).toThrow('WEBHOOK_USAGE_THRESHOLDS');
    }
  });
});

describe('usage events', () => {
  // What each test opened, closed after it: apps kept to the end of the file held PostgreSQL's
  // connections (10 each) until the server, shared with another file's instances, had none left.
  const closing: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    for (const close of closing.splice(0).reverse()) await close();
  });
  const open = async (env: Record<string, string>, clock: TestClock) => {
    const t = await buildTestApp(env, depsOf(clock));
    closing.push(() => t.close());
    return t;
  };

  it('a receiver failing, then answering 200, gets the event twice, signed, with one id, and then never again', async () => {
    const receiver = await startReceiver((index) => (index === 0 ? 500 : 204));
    closing.push(receiver.close);
    const clock = testClock(T0);
    const t = await open(webhookEnv(receiver.url), clock);
    const { headers, quotaId } = await keyInFreshWindows(t.app, clock, { plan: 'enterprise', limits: { perMinute: 2, perDay: 100 } });
    await crossMinute(t.app, headers);

    await eventually(async () => (await deliveriesOf(t.app))[0]?.state === 'delivered', 15_000);
    expect(receiver.received).toHaveLength(2);
    const [first, second] = receiver.received as [Received, Received];
    expect(first.body).toBe(second.body);
    expect(receiver.received.every(verified)).toBe(true);
    expect(first.headers['content-type']).toBe('application/json');
    expect(first.headers['user-agent']).toBe('pet-store-webhooks/1');
    const event = JSON.parse(first.body);
    expect([first.headers['pet-store-event-id'], second.headers['pet-store-event-id']]).toEqual([event.id, event.id]);
    const minuteEnd = (Math.floor(clock.now() / MINUTE) + 1) * MINUTE;
    expect(event).toEqual({
      id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      type: 'usage.threshold',
      createdAt: new Date(clock.now()).toISOString(),
      data: {
        keyId: quotaId,
        quotaId,
        plan: 'enterprise',
        window: 'minute',
        limit: 2,
        used: 2,
        threshold: 100,
        resetAt: new Date(minuteEnd).toISOString(),
      },
    });
    expect(await deliveriesOf(t.app)).toEqual([
      { id: expect.any(Number), state: 'delivered', attempts: 2, event_id: event.id, last_error: null },
    ]);
    const outcomes = (await t.app.metricsRegistry.getSingleMetric('webhook_deliveries_total')!.get()).values;
    expect(Object.fromEntries(outcomes.map(({ labels, value }) => [`${labels.type} ${labels.outcome}`, value]))).toEqual({
      'usage.threshold retried': 1,
      'usage.threshold delivered': 1,
    });
    // The receiver's check refuses a body changed on the way, and a signature changed.
    expect(verified({ ...first, body: first.body.replace('"used":2', '"used":3') })).toBe(false);
    expect(verified({ ...first, signature: first.signature.replace(/v1=(.)/, (_, c: string) => `v1=${c === '0' ? '1' : '0'}`) })).toBe(
      false,
    );
  });

  it('a user and password in WEBHOOK_URL reach the receiver as Basic authentication, and no error, listing or log line holds the password', async () => {
    const password = 'hunter2 p@ss:wörd';
    const receiver = await startReceiver((index) => (index === 0 ? 503 : 204));
    closing.push(receiver.close);
    const clock = testClock(T0);
    const url = receiver.url.replace('//', `//billing:${encodeURIComponent(password)}@`);
    const t = await open(webhookEnv(url), clock);
    const admin = await openAdmin(t.app);
    closing.push(admin.close);
    const { headers } = await keyInFreshWindows(t.app, clock, { plan: 'enterprise', limits: { perMinute: 2, perDay: 100 } });
    await crossMinute(t.app, headers);
    // Delivered at the second attempt; a third means the second failed too.
    await eventually(async () => {
      const [delivery] = await deliveriesOf(t.app);
      return delivery?.state === 'delivered' || (delivery?.attempts ?? 0) >= 3;
    }, 10_000);

    const listed = JSON.stringify((await admin.request('GET', '/admin/v1/webhook-deliveries')).body);
    const logged = JSON.stringify(t.logs.entries());
    expect(logged).toContain('webhooks: delivery attempt failed');
    const credentials = Buffer.from(`billing:${password}`).toString('base64');
    for (const secret of [password, encodeURIComponent(password), credentials]) {
      expect(listed).not.toContain(secret);
      expect(logged).not.toContain(secret);
    }
    expect(await deliveriesOf(t.app)).toEqual([expect.objectContaining({ state: 'delivered', attempts: 2, last_error: null })]);
    expect(receiver.received.map((received) => received.headers.authorization)).toEqual([`Basic ${credentials}`, `Basic ${credentials}`]);
    expect(receiver.received.every(verified)).toBe(true);
  });

  it('records an event once per dedupe key, whichever instance records it again', async () => {
    const clock = testClock(T0);
    const t = await open(webhookEnv(`http://127.0.0.1:${await freePort()}/hooks`), clock);
    const deliveries = createWebhookDeliveriesRepository(t.app.db);
    const key = { id: 7, quotaId: 7, plan: 'pro' } as ApiKeyIdentity;
    const crossing = { key, window: 'minute', limit: 100, used: 80, threshold: 80, resetAt: T0 + MINUTE } as const;
    // Each call makes a new event id, as each instance would; the quota, window start and threshold are the same.
    expect(await deliveries.record(usageThreshold(crossing, clock.now()))).toBe(true);
    expect(await deliveries.record(usageThreshold({ ...crossing, used: 81 }, clock.now()))).toBe(false);
    expect(await deliveries.record(usageThreshold({ ...crossing, threshold: 100, used: 100 }, clock.now()))).toBe(true);
    expect(await deliveries.record(usageThreshold({ ...crossing, resetAt: T0 + 2 * MINUTE }, clock.now()))).toBe(true);
    expect(await deliveries.record(keyBanned({ key, bannedUntil: T0 + 900_000 }, clock.now()))).toBe(true);
    expect(await deliveries.record(keyBanned({ key, bannedUntil: T0 + 900_000 }, clock.now()))).toBe(false);
    expect(await deliveriesOf(t.app)).toHaveLength(4);
  });

  describe('with the default thresholds', () => {
    const clock = testClock(T0);
    let receiver: Awaited<ReturnType<typeof startReceiver>>;
    let t: TestApp;
    // Built before the test, under no test's 60 s: a loaded machine took longer for the build and the test together.
    beforeAll(async () => {
      receiver = await startReceiver(() => 200);
      closing.push(receiver.close);
      t = await open({ WEBHOOK_URL: receiver.url, WEBHOOK_SECRET: SECRET }, clock);
    }, 0);

    it("a free key's minute spent to 80% and then to 100% sends one event at each, in order", async () => {
      const admin = await openAdmin(t.app);
      closing.push(admin.close);
      const created = await createKey(admin, { plan: 'free' });
      const headers = bearer(created.key);
      await waitForKey(async () => (await t.app.inject({ url: '/v1/pets/0', headers })).statusCode);
      clock.set((Math.floor(clock.now() / DAY) + 1) * DAY + 10 * MINUTE);
      const spend = async (requests: number) => {
        for (let i = 0; i < requests; i++) expect((await t.app.inject({ url: '/v1/pets?limit=1', headers })).statusCode).toBe(200);
      };

      await spend(48);
      await receiver.arrived(1);
      await spend(12);
      await receiver.arrived(2);
      const events = receiver.received.map(({ body }) => JSON.parse(body));
      const resetAt = new Date((Math.floor(clock.now() / MINUTE) + 1) * MINUTE).toISOString();
      const data = { keyId: created.id, quotaId: created.quotaId, plan: 'free', window: 'minute', limit: 60, resetAt };
      expect(events.map((event) => event.data)).toEqual([
        { ...data, used: 48, threshold: 80 },
        { ...data, used: 60, threshold: 100 },
      ]);
      expect(receiver.received.every(verified)).toBe(true);
      expect(new Set(events.map((event) => event.id)).size).toBe(2);
    });
  });

  it('a crossing on two instances (each counting alone) is one event, delivered once', { skip: !POSTGRES_URL }, async () => {
    const receiver = await startReceiver(() => 200);
    closing.push(receiver.close);
    const clock = testClock(T0);
    const a = await open(webhookEnv(receiver.url), clock);
    const b = await open({ ...webhookEnv(receiver.url), DATABASE_URL: a.databaseUrl! }, clock);
    const { headers } = await keyInFreshWindows(a.app, clock, { plan: 'enterprise', limits: { perMinute: 2, perDay: 100 } });
    await eventually(async () => (await b.app.inject({ url: '/v1/pets/0', headers })).statusCode !== 401);
    clock.advance(MINUTE);
    await crossMinute(a.app, headers);
    await crossMinute(b.app, headers);
    await eventually(async () => (await deliveriesOf(a.app))[0]?.state === 'delivered');
    expect(await deliveriesOf(b.app)).toHaveLength(1);
    // Both senders look once a second: a second delivery would come within two.
    await eventually(async () => receiver.received.length > 1, 2_500).catch(() => {});
    expect(receiver.received).toHaveLength(1);
  });

  it('a restart between the crossing and the delivery loses nothing: the next instance on the database delivers it', async () => {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}/hooks`;
    const clock = testClock(T0);
    const dir = POSTGRES_URL ? undefined : await mkdtemp(join(tmpdir(), 'pets-webhooks-'));
    if (dir) closing.push(() => rm(dir, { recursive: true, force: true }));
    const first: TestApp = await buildTestApp({ ...webhookEnv(url), ...(dir && { DATA_DIR: dir }) }, depsOf(clock));
    const { headers } = await keyInFreshWindows(first.app, clock, { plan: 'enterprise', limits: { perMinute: 2, perDay: 100 } });
    await crossMinute(first.app, headers);
    // Nothing listens at the URL yet: the first attempt fails, and the event waits in the outbox.
    await eventually(async () => (await deliveriesOf(first.app))[0]?.last_error != null);
    expect((await deliveriesOf(first.app))[0]?.last_error).toBe(`no answer: connect ECONNREFUSED 127.0.0.1:${port}`);
    await first.app.close();

    const receiver = await startReceiver(() => 200, port);
    closing.push(receiver.close);
    const second = await open({ ...webhookEnv(url), ...(dir ? { DATA_DIR: dir } : { DATABASE_URL: first.databaseUrl! }) }, clock);
    if (!dir) closing.push(() => first.close().catch(() => {}));
    await receiver.arrived(1);
    expect(JSON.parse(receiver.received[0]!.body)).toMatchObject({ type: 'usage.threshold', data: { used: 2, threshold: 100 } });
    expect(verified(receiver.received[0]!)).toBe(true);
    await eventually(async () => (await deliveriesOf(second.app))[0]?.state === 'delivered');
  });

  it('a ban is a key.banned event; the admin API lists deliveries by state and puts a failed one back', async () => {
    let accept = false;
    const receiver = await startReceiver(() => (accept ? 200 : 503));
    closing.push(receiver.close);
    const clock = testClock(T0);
    const t = await open(webhookEnv(receiver.url, { RATE_LIMIT_BAN_THRESHOLD: '1' }), clock);
    const admin = await openAdmin(t.app);
    closing.push(admin.close);
    const { headers, quotaId } = await keyInFreshWindows(t.app, clock, { plan: 'enterprise', limits: { perMinute: 2, perDay: 100 } });
    await crossMinute(t.app, headers);
    for (let i = 0; i < 2; i++) expect((await t.app.inject({ url: '/v1/pets?limit=1', headers })).statusCode).toBe(429);
    await eventually(async () => (await deliveriesOf(t.app)).length === 2 && receiver.received.length >= 2);
    // Failing for good: the 24 hours are over.
    await t.app.db.query("UPDATE webhook_deliveries SET retry_until = now() WHERE state = 'pending'");
    await eventually(async () => (await deliveriesOf(t.app)).every((delivery) => delivery.state === 'failed'), 10_000);

    const failed = await admin.request('GET', '/admin/v1/webhook-deliveries?state=failed');
    expect(failed.status).toBe(200);
    // Newest first; the two were recorded without waiting for each other, so either may be newer.
    const ids = failed.body.map((delivery: { id: number }) => delivery.id);
    expect(ids).toEqual([...ids].sort((a, b) => b - a));
    expect(failed.body.map((delivery: { type: string }) => delivery.type).sort()).toEqual(['key.banned', 'usage.threshold']);
    const banned = failed.body.find((delivery: { type: string }) => delivery.type === 'key.banned');
    expect(banned).toMatchObject({ state: 'failed', lastStatus: 503, lastError: 'HTTP 503', nextAttemptAt: null });
    expect(banned.data).toEqual({ keyId: quotaId, quotaId, bannedUntil: new Date(clock.now() + 900_000).toISOString() });
    expect((await admin.request('GET', '/admin/v1/webhook-deliveries?state=delivered')).body).toEqual([]);
    expect((await admin.request('GET', '/admin/v1/webhook-deliveries?state=lost')).status).toBe(400);

    accept = true;
    const retried = await admin.request('POST', `/admin/v1/webhook-deliveries/${banned.id}/retry`);
    expect(retried.status).toBe(200);
    expect(retried.body).toMatchObject({ id: banned.id, state: 'pending' });
    await eventually(async () => (await admin.request('GET', `/admin/v1/webhook-deliveries?state=delivered`)).body.length === 1);
    const again = await admin.request('POST', `/admin/v1/webhook-deliveries/${banned.id}/retry`);
    expect(again.status).toBe(409);
    expect(again.body).toMatchObject({
      code: 'conflict',
      message: `Webhook delivery ${banned.id} was delivered; only a failed or pending one is retried`,
    });
    expect((await admin.request('POST', '/admin/v1/webhook-deliveries/999999/retry')).body.code).toBe('not_found');
    const audit = await admin.request('GET', '/admin/v1/audit?limit=1');
    expect(audit.body[0]).toMatchObject({ action: 'webhook_delivery.retry', details: { deliveryId: banned.id } });
  });

  it('a retry brings a pending delivery waiting out a long backoff forward, and leaves an attempt in flight alone', async () => {
    let answer: Promise<number> | number = 500;
    const receiver = await startReceiver(() => answer);
    closing.push(receiver.close);
    const clock = testClock(T0);
    const t = await open(webhookEnv(receiver.url), clock);
    const admin = await openAdmin(t.app);
    closing.push(admin.close);
    const deliveries = createWebhookDeliveriesRepository(t.app.db);
    const key = { id: 7, quotaId: 7, plan: 'pro' } as ApiKeyIdentity;
    const crossing = { key, window: 'day', limit: 100, used: 80, threshold: 80, resetAt: T0 + DAY } as const;
    expect(await deliveries.record(usageThreshold(crossing, clock.now()))).toBe(true);
    await eventually(async () => (await deliveriesOf(t.app))[0]?.last_error === 'HTTP 500');
    // As if many attempts had failed: the next one an hour away.
    await t.app.db.query("UPDATE webhook_deliveries SET next_attempt_at = now() + interval '1 hour'");
    const waiting = (await deliveriesOf(t.app))[0]!;
    const attempted = receiver.received.length;

    answer = 200;
    const retried = await admin.request('POST', `/admin/v1/webhook-deliveries/${waiting.id}/retry`);
    expect(retried.status).toBe(200);
    expect(retried.body).toMatchObject({ id: waiting.id, state: 'pending' });
    expect(Date.parse(retried.body.nextAttemptAt)).toBeLessThanOrEqual(Date.now() + 1_000);
    await eventually(async () => (await deliveriesOf(t.app))[0]?.state === 'delivered');
    expect(receiver.received).toHaveLength(attempted + 1);

    // The receiver holds the next event's attempt: a retry meanwhile keeps its claim, so no second attempt starts.
    let release!: (status: number) => void;
    answer = new Promise((resolve) => (release = resolve));
    expect(await deliveries.record(usageThreshold({ ...crossing, threshold: 100, used: 100 }, clock.now()))).toBe(true);
    await receiver.arrived(attempted + 2);
    const inFlight = (await deliveriesOf(t.app))[1]!;
    const whileInFlight = await admin.request('POST', `/admin/v1/webhook-deliveries/${inFlight.id}/retry`);
    expect(whileInFlight.status).toBe(200);
    expect(Date.parse(whileInFlight.body.nextAttemptAt)).toBeGreaterThan(Date.now() + 20_000);
    release(200);
    await eventually(async () => (await deliveriesOf(t.app))[1]?.state === 'delivered');
    expect(receiver.received).toHaveLength(attempted + 2);
  });

  it('delivered and failed deliveries are deleted once WEBHOOK_RETENTION_DAYS have passed on the clock, in batches; pending ones never', async () => {
    const clock = testClock(T0);
    const t = await open(webhookEnv(`http://127.0.0.1:${await freePort()}/hooks`, { WEBHOOK_RETENTION_DAYS: '7' }), clock);
    // More than one batch settled a minute before T0; beside them an old pending one, and one delivered a minute after T0.
    await addDeliveries(t.app, { state: 'delivered', count: 700, recordedAt: T0 - MINUTE, label: 'old delivered' });
    await addDeliveries(t.app, { state: 'failed', count: 500, recordedAt: T0 - MINUTE, label: 'old failed' });
    await addDeliveries(t.app, { state: 'pending', count: 1, recordedAt: T0 - MINUTE, label: 'old pending' });
    await addDeliveries(t.app, { state: 'delivered', count: 1, recordedAt: T0 + MINUTE, label: 'young delivered' });

    clock.advance(7 * DAY);
    await eventually(async () => prunedOf(t).length === 1, 10_000);
    expect(prunedOf(t)).toEqual([1_200]);
    expect(await dedupeKeysOf(t.app)).toEqual(['old pending 1', 'young delivered 1']);

    // A minute on (the next prune), the young one's seven days are over too.
    clock.advance(2 * MINUTE);
    await eventually(async () => prunedOf(t).length === 2, 10_000);
    expect(prunedOf(t)).toEqual([1_200, 1]);
    expect(await dedupeKeysOf(t.app)).toEqual(['old pending 1']);
  });

  it('two instances deleting past the retention at once delete each delivery once', { skip: !POSTGRES_URL }, async () => {
    const clock = testClock(T0);
    const url = `http://127.0.0.1:${await freePort()}/hooks`;
    const a = await open(webhookEnv(url), clock);
    const b = await open({ ...webhookEnv(url), DATABASE_URL: a.databaseUrl! }, clock);
    await addDeliveries(a.app, { state: 'delivered', count: 3_000, recordedAt: T0 - MINUTE, label: 'old delivered' });
    await addDeliveries(a.app, { state: 'pending', count: 1, recordedAt: T0 - MINUTE, label: 'old pending' });

    clock.advance(30 * DAY);
    await eventually(async () => [...prunedOf(a), ...prunedOf(b)].reduce((sum, pruned) => sum + pruned, 0) === 3_000, 10_000);
    expect(await dedupeKeysOf(a.app)).toEqual(['old pending 1']);
    expect([...a.logs.entries(), ...b.logs.entries()].filter((entry) => Number(entry.level) >= 40)).toEqual([]);
  });

  it('a failed attempt is tried again after 5 s (docs/admin-api.md), then after twice as long, each with up to 20% jitter', async () => {
    const receiver = await startReceiver(() => 500);
    closing.push(receiver.close);
    const clock = testClock(T0);
    // The production wait, not the suite's shorter one.
    const t = await buildTestApp(webhookEnv(receiver.url), { now: clock.now });
    closing.push(() => t.close());
    const deliveries = createWebhookDeliveriesRepository(t.app.db);
    const key = { id: 7, quotaId: 7, plan: 'pro' } as ApiKeyIdentity;
    expect(
      await deliveries.record(usageThreshold({ key, window: 'day', limit: 100, used: 80, threshold: 80, resetAt: T0 + DAY }, clock.now())),
    ).toBe(true);
    const { id } = (await deliveriesOf(t.app))[0]!;

    /**
     * The wait the sender scheduled after its `attempts`th attempt failed, as far as the outbox
     * tells it: at least the time from the attempt's start to the next attempt, at most the time
     * from when the failure was seen to it (both bounds hold however slow the attempt was).
     */
    const scheduledWait = async (attempts: number) => {
      await eventually(async () => (await outcomesOf(t.app)).retried === attempts);
      const seenAt = Date.now();
      const delivery = (await deliveries.get(id))!;
      expect(delivery).toMatchObject({ state: 'pending', attempts, lastStatus: 500 });
      const nextAttemptAt = Date.parse(delivery.nextAttemptAt!);
      return { atLeast: nextAttemptAt - Date.parse(delivery.lastAttemptAt!), atMost: nextAttemptAt - seenAt };
    };
    // Timestamps are read to the millisecond: 1 ms either way.
    const first = await scheduledWait(1);
    expect(first.atLeast).toBeGreaterThanOrEqual(FIRST_RETRY_MS - 1);
    expect(first.atMost).toBeLessThanOrEqual(1.2 * FIRST_RETRY_MS + 1);

    // Due now rather than in 5 s: its second attempt fails too.
    await t.app.db.query('UPDATE webhook_deliveries SET next_attempt_at = now() WHERE id = $1', [id]);
    const second = await scheduledWait(2);
    expect(second.atLeast).toBeGreaterThanOrEqual(2 * FIRST_RETRY_MS - 1);
    expect(second.atMost).toBeLessThanOrEqual(2.4 * FIRST_RETRY_MS + 1);
  });

  it("an operator's retry gives a failed delivery 24 hours more: failing again, it is tried again, not left failed", async () => {
    const receiver = await startReceiver(() => 500);
    closing.push(receiver.close);
    const clock = testClock(T0);
    const t = await open(webhookEnv(receiver.url), clock);
    const admin = await openAdmin(t.app);
    closing.push(admin.close);
    const deliveries = createWebhookDeliveriesRepository(t.app.db);
    const key = { id: 7, quotaId: 7, plan: 'pro' } as ApiKeyIdentity;
    expect(
      await deliveries.record(usageThreshold({ key, window: 'day', limit: 100, used: 80, threshold: 80, resetAt: T0 + DAY }, clock.now())),
    ).toBe(true);
    await eventually(async () => (await outcomesOf(t.app)).retried === 1);
    // Its 24 hours over: the next attempt fails it for good.
    await t.app.db.query('UPDATE webhook_deliveries SET retry_until = now()');
    await eventually(async () => (await outcomesOf(t.app)).failed === 1);
    const failed = (await deliveriesOf(t.app))[0]!;
    expect(failed.state).toBe('failed');

    expect((await admin.request('POST', `/admin/v1/webhook-deliveries/${failed.id}/retry`)).status).toBe(200);
    // The retried attempt's outcome, whichever it is.
    await eventually(async () => {
      const { retried, failed } = await outcomesOf(t.app);
      return retried + failed === 3;
    });
    expect(await outcomesOf(t.app)).toEqual({ delivered: 0, retried: 2, failed: 1 });
    expect(await deliveries.get(failed.id)).toMatchObject({ state: 'pending', attempts: 3, lastStatus: 500 });
  });

  it('the pending count keeps its last value, and the scrape its other metrics, while the count cannot be read', async () => {
    const url = `http://127.0.0.1:${await freePort()}/hooks`;
    const clock = testClock(T0);
    const t = await open(webhookEnv(url), clock);
    const crossing = {
      key: { id: 7, quotaId: 7, plan: 'pro' } as ApiKeyIdentity,
      window: 'day' as const,
      limit: 100,
      used: 80,
      threshold: 80,
    };
    await createWebhookDeliveriesRepository(t.app.db).record(usageThreshold({ ...crossing, resetAt: T0 + DAY }, clock.now()));
    expect(await t.app.metricsRegistry.metrics()).toContain('webhook_deliveries_pending 1');

    await t.app.db.query('DROP TABLE webhook_deliveries');
    const scraped = await t.app.metricsRegistry.metrics();
    expect(scraped).toContain('webhook_deliveries_pending 1');
    expect(scraped).toContain('http_request_duration_seconds');
    expect(t.logs.entries().some((entry) => entry.msg === 'webhooks: counting the pending deliveries failed')).toBe(true);
  });
});
