import { describe, expect } from 'vitest';
import { eventually } from '../support/eventually.js';
import { appTest } from '../support/fixtures.js';
import type { HttpResponse } from '../support/http.js';
import { bearer, waitForKey, waitUntilCached } from '../support/keys.js';
import { MINUTE } from '../support/time.js';

// Each request is a minute after the last, so the per-address limit on the many unauthenticated
// requests below never fills (rate limiting has tests of its own), while a cached key, kept for
// minutes, outlives a few requests however often one of them reads the clock.
const test = appTest({ clock: Date.now(), anonymous: true }).extend('send', { scope: 'file' }, ({ request, clock }) => {
  const send: typeof request = (...args) => {
    clock.advance(MINUTE);
    return request(...args);
  };
  return send;
});

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

  test.for(operations)(
    '%s %s: 401 without credentials, with another scheme, or with an empty bearer',
    async ([method, path, options], { send }) => {
      const headerSets: Array<Record<string, string>> = [
        {},
        { authorization: 'Basic dXNlcjpwYXNz' },
        { authorization: 'Bearer' },
        { authorization: 'Bearer ' },
      ];
      for (const headers of headerSets) {
        expectUnauthorized(await send(method, path, { ...options, headers }), false);
      }
    },
  );

  test.for(operations)('%s %s: 401 with a malformed or unknown key', async ([method, path, options], { send }) => {
    for (const key of ['not-a-key', 'psk_short', UNKNOWN, `${UNKNOWN}A`, 'a b']) {
      expectUnauthorized(await send(method, path, { ...options, headers: bearer(key) }), true);
    }
  });

  test('refuses before reading the body: an invalid body without credentials is a 401, not a 400 or 415', async ({ send }) => {
    expectUnauthorized(await send('POST', '/v1/pets', { json: { name: '' } }), false);
    expectUnauthorized(await send('POST', '/v1/pets', { headers: { 'content-type': 'text/plain' }, body: 'x' }), false);
  });

  test('accepts a valid key on each operation; the scheme is case-insensitive', async ({ t, send }) => {
    const { key } = await t.app.apiKeysRepository.create({ plan: 'free', name: 'auth test' });
    await waitForKey(async () => (await send('GET', '/v1/pets', { headers: bearer(key) })).status);
    const created = await send('POST', '/v1/pets', { json: { name: 'Rex', categoryId: 1 }, headers: bearer(key) });
    expect(created.status).toBe(201);
    expect((await send('GET', `/v1/pets/${created.body.id}`, { headers: { authorization: `bearer ${key}` } })).status).toBe(200);
  });

  test('a revoked key is refused with the same answer as an unknown one', async ({ t, send }) => {
    const { id, key } = await t.app.apiKeysRepository.create({ plan: 'pro' });
    await waitForKey(async () => (await send('GET', '/v1/pets', { headers: bearer(key) })).status);
    expect(await t.app.keyRules.revoke(id)).toMatchObject({ id, state: 'revoked' });
    await eventually(async () => (await send('GET', '/v1/pets', { headers: bearer(key) })).status === 401);
    const revoked = await send('GET', '/v1/pets', { headers: bearer(key) });
    const unknown = await send('GET', '/v1/pets', { headers: bearer(UNKNOWN) });
    expectUnauthorized(revoked, true);
    expect(revoked.body).toEqual(unknown.body);
  });

  test('health, readiness, the OpenAPI document and the docs stay public', async ({ t, send }) => {
    for (const path of ['/healthz', '/readyz', '/v1/openapi.json']) {
      expect((await send('GET', path)).status, path).toBe(200);
    }
    expect((await fetch(`${t.app.listeningOrigin}/docs/`)).status).toBe(200);
  });
});

describe('keys in memory', () => {
  test('a cached key needs no database round trip, and a key of the wrong shape or checksum never reaches the database', async ({
    t,
    send,
  }) => {
    const { key } = await t.app.apiKeysRepository.create({ plan: 'business' });
    expect((await send('GET', '/v1/pets/1', { headers: bearer(key) })).status).not.toBe(401);
    // Cached for good only once a request needs no lookup: one its creation notice followed would be checked again.
    await waitUntilCached(t.app, bearer(key));
    // Take the keys table away: a known key must not notice, and made-up ones must not ask.
    await t.db.query('ALTER TABLE api_keys RENAME TO api_keys_away');
    try {
      expect((await send('GET', '/v1/pets', { headers: bearer(key) })).status).toBe(200);
      const mistyped = key.slice(0, -1) + (key.endsWith('A') ? 'B' : 'A');
      for (const wrong of [mistyped, `${key}x`, key.slice(0, -1), `psk_${'A'.repeat(49)}`, 'psk_!'.repeat(10)]) {
        expectUnauthorized(await send('GET', '/v1/pets', { headers: bearer(wrong) }), true);
      }
    } finally {
      await t.db.query('ALTER TABLE api_keys_away RENAME TO api_keys');
    }
  });

  test('stores only a SHA-256 hash, and logs the key id but never the key', async ({ t, send }) => {
    const { id, key } = await t.app.apiKeysRepository.create({ plan: 'free', name: 'secret holder' });
    await waitForKey(async () => (await send('GET', '/v1/pets', { headers: bearer(key) })).status);
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
