import { describe, expect } from 'vitest';
import { appTest } from '../support/fixtures.js';
import { SUNSET, T0 } from '../support/time.js';

const test = appTest({ clock: T0 });

const BASE = 'https://api.example.test/v1';

function expectDeprecationHeaders(headers: Record<string, unknown>) {
  expect(headers.deprecation).toBe(`@${Date.parse('2025-12-05T00:00:00Z') / 1000}`);
  expect(headers.sunset).toBe('Thu, 05 Dec 2030 00:00:00 GMT');
  expect(headers.link).toBe(
    `<${BASE}/pets>; rel="successor-version", <${BASE}/openapi.json#/paths/~1pets~1{petId}/get>; rel="deprecation"`,
  );
}

describe('GET /v1/pets/{petId} is deprecated', () => {
  test('announces it on 200, 400 and 404', async ({ t }) => {
    const created = await t.app.inject({ method: 'POST', url: '/v1/pets', payload: { name: 'Old', categoryId: 1 }, headers: t.auth });
    for (const [url, status] of [
      [`/v1/pets/${created.json().id}`, 200],
      ['/v1/pets/nope', 400],
      ['/v1/pets/424242', 404],
    ] as const) {
      const response = await t.app.inject({ method: 'GET', url, headers: t.auth });
      expect(response.statusCode).toBe(status);
      expectDeprecationHeaders(response.headers);
    }
  });

  test('no other operation carries the headers', async ({ t }) => {
    const response = await t.app.inject({ method: 'GET', url: '/v1/pets', headers: t.auth });
    expect(response.headers.deprecation).toBeUndefined();
    expect(response.headers.sunset).toBeUndefined();
  });

  test('answers 410 gone from the sunset instant on, for every input', async ({ t, clock }) => {
    clock.set(SUNSET - 1);
    expect((await t.app.inject({ method: 'GET', url: '/v1/pets/1', headers: t.auth })).statusCode).toBe(200);
    clock.set(SUNSET);
    for (const url of ['/v1/pets/1', '/v1/pets/nope']) {
      const response = await t.app.inject({ method: 'GET', url, headers: t.auth });
      expect(response.statusCode).toBe(410);
      expect(response.json()).toEqual({ code: 'gone', message: expect.stringContaining('/pets'), status: 410 });
      expectDeprecationHeaders(response.headers);
    }
    expect((await t.app.inject({ method: 'GET', url: '/v1/pets', headers: t.auth })).statusCode).toBe(200);
  });
});
