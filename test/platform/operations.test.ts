import { buildMetricsServer } from '../../src/platform/observability/metrics-server.js';
import { describe, expect, vi } from 'vitest';
import type { TestApp } from '../support/app.js';
import { POSTGRES_URL } from '../support/databases.js';
import { eventually } from '../support/eventually.js';
import { describeAppTest } from '../support/fixtures.js';
import { REDIS_URL, redisStoreEnv } from '../support/redis.js';
import { T0 } from '../support/time.js';

describe('Prometheus metrics', () => {
  const test = describeAppTest({ envAtBuild: () => (REDIS_URL ? redisStoreEnv() : {}) });

  const scrape = async (t: TestApp) => {
    const response = await buildMetricsServer(t.app.metricsRegistry).inject('/metrics');
    expect(response.statusCode).toBe(200);
    expect(response.headers['content-type']).toMatch(/^text\/plain/);
    return response.body;
  };
  const sample = (body: string, name: string) => Number(body.match(new RegExp(`^${name.replace(/[{}]/g, '\\$&')} (\\S+)$`, 'm'))?.[1]);

  test('count and time real traffic by route, method and status, with rate-limit decisions', async ({ t }) => {
    const before = await scrape(t);
    const listed = 'http_request_duration_seconds_count{method="GET",route="/v1/pets",status_code="200"}';
    const rejected = 'http_request_duration_seconds_count{method="GET",route="/v1/pets",status_code="400"}';
    const allowed = 'rate_limit_decisions_total{outcome="allowed"}';
    for (let i = 0; i < 7; i++) await t.app.inject({ url: '/v1/pets', headers: t.auth });
    for (let i = 0; i < 3; i++) await t.app.inject({ url: '/v1/pets?limit=500', headers: t.auth });
    await t.app.inject({ url: '/no/such/path/' + Math.random() });
    const after = await scrape(t);
    expect(sample(after, listed) - (sample(before, listed) || 0)).toBe(7);
    expect(sample(after, rejected) - (sample(before, rejected) || 0)).toBe(3);
    expect(sample(after, allowed) - (sample(before, allowed) || 0)).toBe(10);
    expect(after).toMatch(/^http_request_duration_seconds_bucket\{le="0.005",method="GET",route="\/v1\/pets",status_code="200"\} \d+$/m);
    expect(after).toMatch(/route="unmatched"/);
    expect(after).toMatch(/^process_resident_memory_bytes \d+/m);
  });

  test.runIf(POSTGRES_URL)('report the database pool', async ({ t }) => {
    expect(await scrape(t)).toMatch(/^db_pool_connections\{state="idle"\} \d+$/m);
    expect(await scrape(t)).toMatch(/^db_pool_connections\{state="waiting"\} 0$/m);
  });

  test.runIf(REDIS_URL)('report whether rate limiting has fallen back from Redis', async ({ t }) => {
    expect(await scrape(t)).toMatch(/^rate_limit_redis_fallback 0$/m);
  });

  test('are not served on the API port', async ({ t }) => {
    expect((await t.app.inject('/metrics')).statusCode).toBe(404);
  });

  test('any other path on the metrics listener is a 404 Error that repeats at most the first 100 characters of the path', async ({ t }) => {
    const path = `/${'m'.repeat(5_000)}`;
    const response = await buildMetricsServer(t.app.metricsRegistry).inject(`${path}?q=1`);
    expect(response.statusCode).toBe(404);
    expect(response.json()).toEqual({ code: 'not_found', message: `No route for GET ${path.slice(0, 100)}…`, status: 404 });
  });
});

describe('readiness', () => {
  const test = describeAppTest({ clock: T0 });

  test('a flood of /readyz costs one database query a second: concurrent probes share one, later ones reuse its answer', async ({
    t,
    clock,
  }) => {
    const query = vi.spyOn(t.app.db, 'query');
    const checks = () => query.mock.calls.filter(([statement]) => statement === 'SELECT 1').length;
    try {
      const flood = await Promise.all(Array.from({ length: 50 }, () => t.app.inject('/readyz')));
      expect(flood.map((response) => response.statusCode)).toEqual(Array(50).fill(200));
      expect(checks()).toBe(1);
      clock.advance(999);
      expect((await t.app.inject('/readyz')).json()).toEqual({ status: 'ready' });
      expect(checks()).toBe(1);
      clock.advance(1);
      expect((await t.app.inject('/readyz')).json()).toEqual({ status: 'ready' });
      expect(checks()).toBe(2);
    } finally {
      query.mockRestore();
    }
  });
});

describe('load shedding', () => {
  const test = describeAppTest({ env: { LOAD_SHED_EVENT_LOOP_DELAY_MS: '50' } });

  test('answers 503 with Retry-After while the event loop lags, keeps liveness up, and recovers', async ({ t }) => {
    expect((await t.app.inject({ url: '/v1/pets', headers: t.auth })).statusCode).toBe(200);
    // under-pressure takes the event loop's mean delay once a second: a stall begun late in a
    // second is diluted by that second's other samples. So it begins just after a sample (a new
    // reading), and the test awaits the sample that sees it.
    const reading = JSON.stringify(t.app.memoryUsage());
    await eventually(async () => JSON.stringify(t.app.memoryUsage()) !== reading);
    const blockedUntil = Date.now() + 1_500;
    while (Date.now() < blockedUntil); // a real stall of the event loop
    await eventually(async () => t.app.isUnderPressure());

    const shed = await t.app.inject({ url: '/v1/pets', headers: { ...t.auth, origin: 'https://shop.example.com' } });
    expect(shed.statusCode).toBe(503);
    expect(shed.json()).toEqual({ code: 'service_unavailable', message: expect.any(String), status: 503 });
    expect(shed.headers['retry-after']).toBe('5');
    // A page can read it, Retry-After included (CORS_ORIGINS: any origin).
    expect(shed.headers['access-control-allow-origin']).toBe('*');
    expect(shed.headers['access-control-expose-headers']).toContain('retry-after');
    // Under /v1, the rate-limit headers all the same: the key's (known from memory), else the address's.
    const anonymous = await t.app.inject({ url: '/v1/no-such-path' });
    expect([shed.statusCode, anonymous.statusCode]).toEqual([503, 503]);
    for (const [response, limit] of [
      [shed, '1000000000'],
      [anonymous, '60'],
    ] as const) {
      expect(response.headers['x-ratelimit-limit']).toBe(limit);
      expect(response.headers['x-ratelimit-remaining']).toMatch(/^\d+$/);
      expect(response.headers['x-ratelimit-reset']).toMatch(/^\d{10}$/);
    }
    expect((await t.app.inject('/readyz')).statusCode).toBe(503);
    expect((await t.app.inject('/healthz')).statusCode).toBe(200);

    await eventually(async () => (await t.app.inject({ url: '/v1/pets', headers: t.auth })).statusCode === 200, 5_000);
    expect((await t.app.inject('/readyz')).statusCode).toBe(200);
  });
});

describe('load shedding off for the event loop (LOAD_SHED_EVENT_LOOP_DELAY_MS=0, as the tests run)', () => {
  const test = describeAppTest({ env: { LOAD_SHED_EVENT_LOOP_DELAY_MS: '0' } });

  test('a stall of the event loop over a whole reading sheds nothing', async ({ t }) => {
    const reading = JSON.stringify(t.app.memoryUsage());
    await eventually(async () => JSON.stringify(t.app.memoryUsage()) !== reading);
    const blockedUntil = Date.now() + 1_500;
    while (Date.now() < blockedUntil); // a real stall of the event loop, past the next reading
    const stalled = JSON.stringify(t.app.memoryUsage());
    await eventually(async () => JSON.stringify(t.app.memoryUsage()) !== stalled);
    expect(t.app.isUnderPressure()).toBe(false);
    expect((await t.app.inject({ url: '/v1/pets', headers: t.auth })).statusCode).toBe(200);
  });
});

describe.runIf(POSTGRES_URL)('load shedding on pool exhaustion', () => {
  // Without the pets cache, so that every request below needs a connection.
  const test = describeAppTest({ env: { DB_POOL_SIZE: '1', LOAD_SHED_POOL_WAITING: '3', PETS_CACHE_MAX_BYTES: '0' } });

  test('answers 503 once too many requests wait for a database connection, and recovers', async ({ t }) => {
    // Hold the only connection, then queue requests behind it.
    const holding = t.db.query('SELECT pg_sleep(2)');
    const queued = Array.from({ length: 8 }, (_, i) => t.app.inject({ url: `/v1/pets?limit=${i + 1}`, headers: t.auth }));
    // The pool is checked every 500 ms; new requests are then refused at once, without queueing.
    await eventually(async () => t.app.isUnderPressure(), 1_700);
    const shed = await t.app.inject({ url: '/v1/pets', headers: t.auth });
    expect(shed.statusCode).toBe(503);
    expect(shed.json().code).toBe('service_unavailable');
    expect(shed.headers['retry-after']).toBe('5');
    expect((await t.app.inject({ url: '/readyz' })).statusCode).toBe(503);
    await holding;
    const statuses = (await Promise.all(queued)).map((response) => response.statusCode);
    expect(statuses.every((status) => status === 200 || status === 503)).toBe(true);
    await eventually(async () => (await t.app.inject({ url: '/v1/pets', headers: t.auth })).statusCode === 200, 5_000);
  });
});
