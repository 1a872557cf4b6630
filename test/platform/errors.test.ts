import { expect } from 'vitest';
import { buildTestApp } from '../support/app.js';
import { appTest } from '../support/fixtures.js';

// Without the pets cache, so that the listing below reaches the broken table.
const test = appTest({ env: { PETS_CACHE_MAX_BYTES: '0' } });

test('a failure inside the service is a 500 Error that leaks nothing, logged with the request id', async ({ t }) => {
  // A real fault: the table the repository reads is gone.
  await t.db.query('ALTER TABLE pets RENAME TO pets_elsewhere');
  try {
    const response = await t.app.inject({ method: 'GET', url: '/v1/pets', headers: { ...t.auth, origin: 'https://shop.example.com' } });
    expect(response.statusCode).toBe(500);
    // A page can read it (CORS_ORIGINS: any origin).
    expect(response.headers['access-control-allow-origin']).toBe('*');
    expect(response.headers['content-type']).toMatch(/^application\/json/);
    const body = response.json();
    expect(body).toEqual({ code: 'internal_error', message: expect.any(String), status: 500 });
    expect(body.message).not.toMatch(/pets|relation|select|at .*\.ts/i);
    const logged = t.logs.entries().find((entry) => entry.msg === 'unexpected error');
    expect(logged).toBeDefined();
    expect(body.message).toContain(String(logged!.reqId));
    expect(JSON.stringify(logged!.err)).toMatch(/pets/);
  } finally {
    await t.db.query('ALTER TABLE pets_elsewhere RENAME TO pets');
  }
});

test('health and readiness are outside /v1 and answer without credentials', async ({ t }) => {
  expect((await t.app.inject('/healthz')).json()).toEqual({ status: 'ok' });
  expect((await t.app.inject('/readyz')).json()).toEqual({ status: 'ready' });
});

test('readiness is a 503 Error while the database is unreachable', async () => {
  const own = await buildTestApp();
  await own.db.close();
  const response = await own.app.inject('/readyz');
  expect(response.statusCode).toBe(503);
  expect(response.headers['retry-after']).toBe('5');
  expect(response.json()).toEqual({
    code: 'service_unavailable',
    message: `Database is unreachable (request id ${String(response.headers['x-request-id'])})`,
    status: 503,
  });
  await own.close().catch(() => {});
});
