import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildTestApp, type TestApp } from './support/app.js';
import { eventually } from './support/eventually.js';
import { type HttpResponse, listen } from './support/http.js';

let t: TestApp;
let send: Awaited<ReturnType<typeof listen>>;
// Each request is a minute after the last, so the per-address limit on the many unauthenticated
// requests below never fills (rate limiting has tests of its own), while a cached key, kept for
// minutes, outlives a few requests however often one of them reads the clock.
let clock = Date.now();
const request: typeof send = (...args) => {
  clock += 60_000;
  return send(...args);
};
beforeAll(async () => {
  t = await buildTestApp({}, { now: () => clock });
  send = await listen(t.app);
});
afterAll(() => t.close());

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });
const UNKNOWN = `psk_${'A'.repeat(43)}`;

function expectUnauthorized(response: HttpResponse, tokenPresented: boolean) {
  expect(response.status).toBe(401);
  expect(response.body).toEqual({ code: 'unauthorized', message: expect.any(String), status: 401 });
  expect(response.headers.get('www-authenticate')).toBe(
    tokenPresented ? 'Bearer realm="pets", error="invalid_token"' : 'Bearer realm="pets"',
  );
}

describe('bearer authentication on every /v1 operation', () => {
  const operations: Array<[string, string, object?]> = [
    ['GET', '/v1/pets'],
    ['POST', '/v1/pets', { json: { name: 'Rex', categoryId: 1 } }],
    ['GET', '/v1/pets/1'],
  ];

  it.each(operations)('%s %s: 401 without credentials, with another scheme, or with an empty bearer', async (method, path, options) => {
    const headerSets: Array<Record<string, string>> = [{}, { authorization: 'Basic dXNlcjpwYXNz' }, { authorization: 'Bearer' }, { authorization: 'Bearer ' }];
    for (const headers of headerSets) {
      expectUnauthorized(await request(method, path, { ...options, headers }), false);
    }
  });

  it.each(operations)('%s %s: 401 with a malformed or unknown key', async (method, path, options) => {
    for (const key of ['not-a-key', 'psk_short', UNKNOWN, `${UNKNOWN}A`, 'a b']) {
      expectUnauthorized(await request(method, path, { ...options, headers: bearer(key) }), true);
    }
  });

  it('refuses before reading the body: an invalid body without credentials is a 401, not a 400 or 415', async () => {
    expectUnauthorized(await request('POST', '/v1/pets', { json: { name: '' } }), false);
    expectUnauthorized(await request('POST', '/v1/pets', { headers: { 'content-type': 'text/plain' }, body: 'x' }), false);
  });

  it('accepts a valid key on each operation; the scheme is case-insensitive', async () => {
    const { key } = await t.app.apiKeysRepository.create({ plan: 'free', name: 'auth test' });
    await eventually(async () => (await request('GET', '/v1/pets', { headers: bearer(key) })).status === 200);
    const created = await request('POST', '/v1/pets', { json: { name: 'Rex', categoryId: 1 }, headers: bearer(key) });
    expect(created.status).toBe(201);
    expect((await request('GET', `/v1/pets/${created.body.id}`, { headers: { authorization: `bearer ${key}` } })).status).toBe(200);
  });

  it('a revoked key is refused with the same answer as an unknown one', async () => {
    const { id, key } = await t.app.apiKeysRepository.create({ plan: 'pro' });
    await eventually(async () => (await request('GET', '/v1/pets', { headers: bearer(key) })).status === 200);
    expect(await t.app.apiKeysRepository.revoke(id)).toBe(true);
    await eventually(async () => (await request('GET', '/v1/pets', { headers: bearer(key) })).status === 401);
    const revoked = await request('GET', '/v1/pets', { headers: bearer(key) });
    const unknown = await request('GET', '/v1/pets', { headers: bearer(UNKNOWN) });
    expectUnauthorized(revoked, true);
    expect(revoked.body).toEqual(unknown.body);
  });

  it('health, readiness, the OpenAPI document and the docs stay public', async () => {
    for (const path of ['/healthz', '/readyz', '/v1/openapi.json']) {
      expect((await request('GET', path)).status, path).toBe(200);
    }
    expect((await fetch(`${t.app.listeningOrigin}/docs/`)).status).toBe(200);
  });
});

describe('keys in memory', () => {
  it('a cached key needs no database round trip, and a key of the wrong shape or checksum never reaches the database', async () => {
    const { key } = await t.app.apiKeysRepository.create({ plan: 'business' });
    expect((await request('GET', '/v1/pets/1', { headers: bearer(key) })).status).not.toBe(401);
    // Take the keys table away: a known key must not notice, and made-up ones must not ask.
    await t.db.query('ALTER TABLE api_keys RENAME TO api_keys_away');
    try {
      expect((await request('GET', '/v1/pets', { headers: bearer(key) })).status).toBe(200);
      const mistyped = key.slice(0, -1) + (key.endsWith('A') ? 'B' : 'A');
      for (const wrong of [mistyped, `${key}x`, key.slice(0, -1), `psk_${'A'.repeat(49)}`, 'psk_!'.repeat(10)]) {
        expectUnauthorized(await request('GET', '/v1/pets', { headers: bearer(wrong) }), true);
      }
    } finally {
      await t.db.query('ALTER TABLE api_keys_away RENAME TO api_keys');
    }
  });

  it('stores only a SHA-256 hash, and logs the key id but never the key', async () => {
    const { id, key } = await t.app.apiKeysRepository.create({ plan: 'free', name: 'secret holder' });
    await eventually(async () => (await request('GET', '/v1/pets', { headers: bearer(key) })).status === 200);
    const rows = await t.db.query<{ row: string }>('SELECT row_to_json(k)::text AS row FROM api_keys k');
    const everything = rows.map((r) => r.row).join('\n');
    expect(everything).not.toContain(key);
    expect(everything).not.toContain(key.slice(4));
    const [stored] = await t.db.query<{ matches: boolean }>(
      "SELECT key_hash = sha256(convert_to($1, 'UTF8')) AS matches FROM api_keys WHERE id = $2",
      [key, id],
    );
    expect(stored!.matches).toBe(true);

    const logs = t.logs.lines.join('\n');
    expect(logs).not.toContain(key);
    expect(logs).not.toContain(key.slice(4));
    const line = t.logs.entries().findLast((entry) => entry.msg === 'request' && entry.keyId === id);
    expect(line).toMatchObject({ method: 'GET', route: '/v1/pets', status: 200 });
  });
});
