import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { describe, expect } from 'vitest';
import { generateAdminToken, generateKey } from '../../src/api-keys/format.js';
import { MAX_OVERLAP_SECONDS } from '../../src/api-keys/lifecycle.js';
import { buildApp } from '../../src/app.js';
import { loadConfig } from '../../src/platform/config.js';
import { developmentKeyGreeting } from '../../src/api-keys/development-key.js';
import { createAdminTokensRepository } from '../../src/admin/tokens-repository.js';
import { KEYS_COMMAND, openAdmin, type TestAdmin } from '../support/admin.js';
import { POSTGRES_URL } from '../support/databases.js';
import { eventually } from '../support/eventually.js';
import { appTest, describeAppTest, twoInstancesTest } from '../support/fixtures.js';
import type { HttpResponse } from '../support/http.js';
import { bearer, waitForKeyOnApp, waitUntilCached } from '../support/keys.js';
import { captureLogs } from '../support/logs.js';
import { closedWithin, openSocket } from '../support/raw-socket.js';
import { buildTestApp } from '../support/app.js';
import { countKeys, RATE_LIMIT_STORES, REDIS_URL, startRedis } from '../support/redis.js';
import { DAY, MINUTE, T0, testClock } from '../support/time.js';

const KEY = /^psk_[0-9A-Za-z]{49}$/;

const test = appTest().extend('admin', { scope: 'file' }, async ({ t }, { onCleanup }) => {
  const admin = await openAdmin(t.app);
  onCleanup(admin.close);
  return admin;
});

function expectError(response: HttpResponse, status: number, code: string) {
  expect(response.status, JSON.stringify(response.body)).toBe(status);
  expect(response.body).toEqual({ code, message: expect.any(String), status });
}

/** Creates a key through the API with the write token. */
async function createKey(admin: TestAdmin, body: Record<string, unknown> = { plan: 'free' }) {
  const response = await admin.request('POST', '/admin/v1/keys', { json: body });
  expect(response.status, JSON.stringify(response.body)).toBe(201);
  return response.body as { id: number; key: string; [field: string]: unknown };
}

/**
 * Rotates an enterprise key of 10 a minute with a 600 s overlap, has `api` cache the old key, and
 * changes the successor to 1 a minute through `admin`: the old key, on `api`, then answers with
 * the new policy and is refused at the new limit, in the quota it shares with its successor.
 */
async function expectSuccessorChangeOnOldKey(admin: TestAdmin, api: FastifyInstance) {
  const { id, key: old } = await createKey(admin, { plan: 'enterprise', perMinute: 10, perDay: 1_000, name: 'abusive' });
  const rotated = await admin.request('POST', `/admin/v1/keys/${id}/rotate`, { json: { overlapSeconds: 600 } });
  expect(rotated.status).toBe(201);
  await waitForKeyOnApp(api, bearer(old));
  await waitUntilCached(api, bearer(old));
  const get = () => api.inject({ url: '/v1/pets?limit=1', headers: bearer(old) });
  expect((await get()).headers['ratelimit-policy']).toBe('"minute";q=10;w=60, "day";q=1000;w=86400');

  const changed = await admin.request('PATCH', `/admin/v1/keys/${rotated.body.id}`, { json: { perMinute: 1 } });
  expect(changed.status).toBe(200);
  await eventually(async () => (await get()).headers['ratelimit-policy'] === '"minute";q=1;w=60, "day";q=1000;w=86400', 1_000);
  // The quota has counted more than one request this minute; a minute ending meanwhile lets one more through at most.
  const statuses = [];
  for (let i = 0; i < 3; i++) statuses.push((await get()).statusCode);
  expect(statuses).toContain(429);
  expect((await admin.request('GET', `/admin/v1/keys/${id}`)).body).toMatchObject({ state: 'rotated', perMinute: 1, perDay: 1_000 });
  // Still not changeable itself: its successor is.
  expectError(await admin.request('PATCH', `/admin/v1/keys/${id}`, { json: { perMinute: 5 } }), 409, 'conflict');
  return { id, successorId: rotated.body.id as number };
}

/** Every operation, whether it writes, and a request of it that a write token may make (on key `id`). */
const operations = (id: number) =>
  [
    ['POST', '/admin/v1/keys', { plan: 'free' }, true],
    ['GET', '/admin/v1/keys', undefined, false],
    ['GET', `/admin/v1/keys/${id}`, undefined, false],
    ['PATCH', `/admin/v1/keys/${id}`, { name: 'renamed' }, true],
    ['POST', `/admin/v1/keys/${id}/rotate`, { overlapSeconds: 60 }, true],
    ['POST', `/admin/v1/keys/${id}/revoke`, undefined, true],
    ['GET', `/admin/v1/keys/${id}/usage`, undefined, false],
    ['DELETE', `/admin/v1/keys/${id}/ban`, undefined, true],
    ['GET', '/admin/v1/address-bans', undefined, false],
    ['DELETE', '/admin/v1/address-bans/192.0.2.200', undefined, true],
    ['GET', '/admin/v1/audit', undefined, false],
  ] as const;

describe('admin tokens', () => {
  test('every operation refuses a missing, malformed, made-up, revoked or API-key credential with 401', async ({ t, admin }) => {
    const { id } = await createKey(admin);
    const revoked = await createAdminTokensRepository(t.db).create({ name: 'gone', scope: 'write' }, KEYS_COMMAND);
    await createAdminTokensRepository(t.db).revoke(revoked.id, KEYS_COMMAND);
    const { key: apiKey } = await t.app.apiKeysRepository.create({ plan: 'business' });
    const credentials: Array<[string, Record<string, string>]> = [
      ['none', {}],
      ['another scheme', { authorization: `Basic ${admin.write.token}` }],
      ['malformed', bearer('psa_nope')],
      ['made up, with a valid checksum', bearer(generateAdminToken())],
      ['revoked', bearer(revoked.token)],
      ['an API key', bearer(apiKey)],
      ['a made-up API key', bearer(generateKey())],
    ];
    for (const [method, path, json] of operations(id)) {
      for (const [label, headers] of credentials) {
        const response = await admin.request(method, path, { json, headers: { authorization: '', ...headers } });
        expectError(response, 401, 'unauthorized');
        expect(response.headers.get('www-authenticate'), `${method} ${path} ${label}`).toMatch(/^Bearer realm="pets-admin"/);
      }
    }
    expect((await t.app.apiKeysRepository.get(id))!.state).toBe('active');
  });

  test('a read token may call every read; each change is a 403 that changes nothing', async ({ t, admin }) => {
    const { id } = await createKey(admin, { plan: 'free', name: 'read scope' });
    const read = bearer(admin.read.token);
    for (const [method, path, json, writes] of operations(id)) {
      const response = await admin.request(method, path, { json, headers: read });
      if (writes) {
        expectError(response, 403, 'forbidden');
        expect(response.headers.get('www-authenticate')).toContain('insufficient_scope');
      } else expect(response.status, `${method} ${path}`).toBe(200);
    }
    expect(await t.app.apiKeysRepository.get(id)).toMatchObject({ name: 'read scope', state: 'active', replacedBy: null });
  });

  test('a write token may call every operation', async ({ admin }) => {
    const { id } = await createKey(admin);
    const statuses = [];
    for (const [method, path, json] of operations(id)) statuses.push((await admin.request(method, path, { json })).status);
    expect(statuses).toEqual([201, 200, 200, 200, 201, 200, 200, 204, 200, 204, 200]);
  });

  test('a revoked token is refused at once', async ({ t, admin }) => {
    const tokens = createAdminTokensRepository(t.db);
    const { id, token } = await tokens.create({ name: 'short-lived', scope: 'read' }, KEYS_COMMAND);
    expect((await admin.request('GET', '/admin/v1/keys', { headers: bearer(token) })).status).toBe(200);
    await tokens.revoke(id, KEYS_COMMAND);
    expectError(await admin.request('GET', '/admin/v1/keys', { headers: bearer(token) }), 401, 'unauthorized');
  });
});

describe('create', () => {
  test('201 with the secret shown once, a Location, and a key that works on /v1', async ({ t, admin }) => {
    const response = await admin.request('POST', '/admin/v1/keys', {
      json: { plan: 'enterprise', name: 'acme corp', perMinute: 500, perDay: 50_000, expiresAt: '2099-01-31T00:00:00Z' },
    });
    expect(response.status).toBe(201);
    const created = response.body;
    expect(created).toEqual({
      id: expect.any(Number),
      name: 'acme corp',
      plan: 'enterprise',
      perMinute: 500,
      perDay: 50_000,
      readOnly: false,
      state: 'active',
      createdAt: expect.any(String),
      expiresAt: '2099-01-31T00:00:00.000Z',
      revokedAt: null,
      replacedBy: null,
      quotaId: created.id,
      key: expect.stringMatching(KEY),
    });
    expect(response.headers.get('location')).toBe(`/admin/v1/keys/${created.id}`);
    await waitForKeyOnApp(t.app, bearer(created.key));
    const used = await t.app.inject({ url: '/v1/pets', headers: bearer(created.key) });
    expect(used.headers['x-ratelimit-limit']).toBe('500');
    // Shown once: the key is never read back.
    const fetched = await admin.request('GET', `/admin/v1/keys/${created.id}`);
    expect(fetched.body).toEqual({ ...created, key: undefined });
    expect(JSON.stringify(fetched.body)).not.toMatch(/psk_|hash/);
  });

  test('a read-only key reads and may not write', async ({ t, admin }) => {
    const { key } = await createKey(admin, { plan: 'pro', readOnly: true });
    await waitForKeyOnApp(t.app, bearer(key));
    const refused = await t.app.inject({ method: 'POST', url: '/v1/pets', headers: bearer(key), payload: { name: 'No', categoryId: 1 } });
    expect(refused.statusCode).toBe(403);
  });

  test('400 for limits that do not go with the plan, unknown fields, a past expiry and bad values; nothing is created', async ({
    t,
    admin,
  }) => {
    const before = (await t.app.apiKeysRepository.list()).length;
    for (const [json, field] of [
      [{ plan: 'enterprise' }, 'enterprise'],
      [{ plan: 'enterprise', perMinute: 5 }, 'enterprise'],
      [{ plan: 'free', perMinute: 5 }, 'free'],
      [{ plan: 'gold' }, 'body/plan'],
      [{ plan: 'free', colour: 'red' }, 'body'],
      [{ plan: 'free', expiresAt: '2020-01-01T00:00:00Z' }, 'body/expiresAt'],
      [{ plan: 'free', expiresAt: 'tomorrow' }, 'body/expiresAt'],
      [{ plan: 'free', name: 'tab\there' }, 'body/name'],
      [{ plan: 'enterprise', perMinute: 0, perDay: 10 }, 'body/perMinute'],
      [{}, 'body/plan'],
    ] as const) {
      const response = await admin.request('POST', '/admin/v1/keys', { json });
      expectError(response, 400, 'bad_request');
      expect(response.body.message, JSON.stringify(json)).toContain(field);
    }
    expect((await t.app.apiKeysRepository.list()).length).toBe(before);
  });

  test('400 for a body that is not valid UTF-8; nothing is created', async ({ t, admin }) => {
    const before = (await t.app.apiKeysRepository.list()).length;
    const response = await admin.server.inject({
      method: 'POST',
      url: '/admin/v1/keys',
      headers: { ...bearer(admin.write.token), 'content-type': 'application/json' },
      payload: Buffer.concat([Buffer.from('{"plan":"free","name":"a'), Buffer.from([0xc3, 0x28]), Buffer.from('"}')]),
    });
    expect(response.statusCode, response.body).toBe(400);
    expect(response.json()).toEqual({ code: 'bad_request', message: 'Request body is not valid UTF-8', status: 400 });
    expect((await t.app.apiKeysRepository.list()).length).toBe(before);
  });

  test('400 for an expiry that is not on the calendar, on create and rotate, where Date would roll it over; nothing is created', async ({
    t,
    admin,
  }) => {
    const { id } = await createKey(admin);
    const before = await t.app.apiKeysRepository.list();
    for (const expiresAt of ['2099-02-31T00:00:00Z', '2099-04-31T12:00:00+02:00', '2100-02-29T00:00:00Z', '2099-01-01T24:00:00Z']) {
      const created = await admin.request('POST', '/admin/v1/keys', { json: { plan: 'free', expiresAt } });
      expectError(created, 400, 'bad_request');
      expect(created.body.message, expiresAt).toMatch(/^body\/expiresAt .*calendar/);
      const rotated = await admin.request('POST', `/admin/v1/keys/${id}/rotate`, { json: { expiresAt } });
      expectError(rotated, 400, 'bad_request');
      expect(rotated.body.message, expiresAt).toMatch(/^body\/expiresAt .*calendar/);
    }
    expect(await t.app.apiKeysRepository.list()).toEqual(before);
    // A leap day that exists is a date like any other.
    expect((await admin.request('POST', '/admin/v1/keys', { json: { plan: 'free', expiresAt: '2096-02-29T00:00:00Z' } })).status).toBe(201);
  });

  test('400 for an expiry past 9999-12-31T23:59:59Z, which RFC 3339 cannot write; the last second of 9999 is kept as sent', async ({
    t,
    admin,
  }) => {
    const { id } = await createKey(admin);
    const before = await t.app.apiKeysRepository.list();
    // 10000-01-01T13:59:59Z: served as +010000-01-01T13:59:59.000Z, had it been stored.
    for (const expiresAt of ['9999-12-31T23:59:59-14:00', '9999-12-31T23:59:59.5Z']) {
      for (const [path, json] of [
        ['/admin/v1/keys', { plan: 'free', expiresAt }],
        [`/admin/v1/keys/${id}/rotate`, { expiresAt }],
      ] as const) {
        const response = await admin.request('POST', path, { json });
        expectError(response, 400, 'bad_request');
        expect(response.body.message, `${path} ${expiresAt}`).toBe('body/expiresAt must be no later than 9999-12-31T23:59:59Z');
      }
    }
    expect(await t.app.apiKeysRepository.list()).toEqual(before);
    const last = await createKey(admin, { plan: 'free', expiresAt: '9999-12-31T23:59:59Z' });
    expect(last.expiresAt).toBe('9999-12-31T23:59:59.000Z');
    expect((await admin.request('GET', `/admin/v1/keys/${last.id}`)).body.expiresAt).toBe('9999-12-31T23:59:59.000Z');
  });

  test('a retry with the Idempotency-Key gets the same key object, without the secret, and issues no second key', async ({ t, admin }) => {
    const headers = { 'idempotency-key': 'signup-4711' };
    const first = await admin.request('POST', '/admin/v1/keys', { json: { plan: 'pro', name: 'signup 4711' }, headers });
    expect(first.status).toBe(201);
    expect(first.body.key).toMatch(KEY);
    const retry = await admin.request('POST', '/admin/v1/keys', { json: { name: 'signup 4711', plan: 'pro' }, headers });
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.headers.get('location')).toBe(first.headers.get('location'));
    expect(retry.body).toEqual({ ...first.body, key: undefined });
    const other = await admin.request('POST', '/admin/v1/keys', { json: { plan: 'free', name: 'signup 4711' }, headers });
    expectError(other, 422, 'idempotency_key_mismatch');
    expect((await t.app.apiKeysRepository.list()).filter((key) => key.name === 'signup 4711')).toHaveLength(1);
    // The secret is stored nowhere, the idempotency table included.
    const stored = await t.db.query<{ body: string }>('SELECT body FROM admin_idempotency_keys');
    expect(JSON.stringify(stored)).not.toContain(first.body.key);
  });

  test('20 concurrent creates with one Idempotency-Key issue one key', async ({ t, admin }) => {
    const headers = { 'idempotency-key': '"billing-retry-1"' };
    const responses = await Promise.all(
      Array.from({ length: 20 }, () => admin.request('POST', '/admin/v1/keys', { json: { plan: 'business', name: 'twenty' }, headers })),
    );
    const statuses = responses.map((response) => response.status);
    expect(
      statuses.every((status) => status === 201 || status === 409),
      String(statuses),
    ).toBe(true);
    expect(responses.filter((response) => response.body.key !== undefined)).toHaveLength(1);
    expect(new Set(responses.filter((response) => response.status === 201).map((response) => response.body.id)).size).toBe(1);
    expect((await t.app.apiKeysRepository.list()).filter((key) => key.name === 'twenty')).toHaveLength(1);
    // The two kinds of Idempotency-Key never meet: the API key's table has none of these.
    expect(await t.db.query("SELECT 1 FROM idempotency_keys WHERE key = 'billing-retry-1'")).toEqual([]);
  });

  test('a retry by another admin token is another request', async ({ t, admin }) => {
    const headers = { 'idempotency-key': 'shared-name' };
    const other = await createAdminTokensRepository(t.db).create({ name: 'second billing', scope: 'write' }, KEYS_COMMAND);
    const first = await admin.request('POST', '/admin/v1/keys', { json: { plan: 'free', name: 'per token' }, headers });
    const second = await admin.request('POST', '/admin/v1/keys', {
      json: { plan: 'free', name: 'per token' },
      headers: { ...headers, ...bearer(other.token) },
    });
    expect([first.status, second.status]).toEqual([201, 201]);
    expect(second.body.id).not.toBe(first.body.id);
  });
});

describe('key names', () => {
  // The rule of a pet's name (src/platform/schemas/common.ts), with '' for no name.
  const refused = [
    'a\udc00',
    'x\ud800y',
    '\u200b',
    '\u3164',
    '\u00ad',
    ' \u2800\u115f ',
    'acme\u202e',
    '\u2066acme\u2069',
    'tab\there',
    'esc\u001b[31m',
  ];

  test('create: 400 for a lone surrogate, a name of invisible characters only, a bidi override or a control; nothing is created', async ({
    t,
    admin,
  }) => {
    const before = await t.app.apiKeysRepository.list();
    for (const name of refused) {
      const response = await admin.request('POST', '/admin/v1/keys', { json: { plan: 'free', name } });
      expectError(response, 400, 'bad_request');
      expect(response.body.message, JSON.stringify(name)).toMatch(/^body\/name must be empty or 1 to 200 characters, one of them visible/);
    }
    expect(await t.app.apiKeysRepository.list()).toEqual(before);
  });

  test('change: the same 400s, and the name is kept; the audit trail records nothing', async ({ admin }) => {
    const { id } = await createKey(admin, { plan: 'free', name: 'kept' });
    const newest = async () => (await admin.request('GET', '/admin/v1/audit?limit=1')).body[0].id as number;
    const audited = await newest();
    for (const name of refused) {
      const response = await admin.request('PATCH', `/admin/v1/keys/${id}`, { json: { name } });
      expectError(response, 400, 'bad_request');
      expect(response.body.message, JSON.stringify(name)).toContain('body/name');
    }
    expect((await admin.request('GET', `/admin/v1/keys/${id}`)).body.name).toBe('kept');
    expect(await newest()).toBe(audited);
  });

  test("'' is no name; up to 200 characters, counted as code points; invisible characters beside a visible one", async ({ admin }) => {
    for (const name of ['', '🔑'.repeat(200), '\u200fشركة', 'a\u00adb']) {
      const created = await admin.request('POST', '/admin/v1/keys', { json: { plan: 'free', name } });
      expect(created.status, JSON.stringify(created.body)).toBe(201);
      expect(created.body.name).toBe(name);
      const { id } = await createKey(admin, { plan: 'free', name: 'before' });
      expect((await admin.request('PATCH', `/admin/v1/keys/${id}`, { json: { name } })).body.name).toBe(name);
    }
    expectError(await admin.request('POST', '/admin/v1/keys', { json: { plan: 'free', name: 'x'.repeat(201) } }), 400, 'bad_request');
  });
});

describe('list and get', () => {
  test('pages through every key with Link rel="next", filtered by plan, state and name', async ({ admin }) => {
    const name = `listed ${Date.now()}`;
    const made = [];
    for (let i = 0; i < 5; i++) made.push(await createKey(admin, { plan: 'pro', name }));
    await admin.request('POST', `/admin/v1/keys/${made[1]!.id}/revoke`);
    const seen: Array<{ id: number; state: string }> = [];
    let path: string | undefined = `/admin/v1/keys?name=${encodeURIComponent(name)}&limit=2`;
    let pages = 0;
    while (path) {
      const response = await admin.request('GET', path);
      expect(response.status).toBe(200);
      seen.push(...response.body);
      pages++;
      path = response.headers.get('link')?.match(/^<([^>]+)>; rel="next"$/)?.[1];
    }
    expect(pages).toBe(3);
    expect(seen.map((key) => key.id)).toEqual(made.map((key) => key.id));
    expect(seen.map((key) => key.state)).toEqual(['active', 'revoked', 'active', 'active', 'active']);

    const active = await admin.request('GET', `/admin/v1/keys?name=${encodeURIComponent(name)}&state=active&plan=pro`);
    expect(active.body.map((key: { id: number }) => key.id)).toEqual([made[0]!.id, ...made.slice(2).map((key) => key.id)]);
    expect((await admin.request('GET', `/admin/v1/keys?name=${encodeURIComponent(name)}&plan=free`)).body).toEqual([]);
    const revoked = await admin.request('GET', '/admin/v1/keys?state=revoked&limit=100');
    expect(revoked.body.every((key: { state: string }) => key.state === 'revoked')).toBe(true);
  });

  test('400 for a bad filter, limit or cursor, and for a cursor made for other filters', async ({ admin }) => {
    for (const query of ['state=lost', 'plan=gold', 'limit=0', 'limit=101', 'cursor=garbage!']) {
      expectError(await admin.request('GET', `/admin/v1/keys?${query}`), 400, 'bad_request');
    }
    await createKey(admin, { plan: 'free', name: 'cursor a' });
    await createKey(admin, { plan: 'free', name: 'cursor a' });
    const first = await admin.request('GET', '/admin/v1/keys?limit=1&plan=free');
    const cursor = first.headers.get('link')!.match(/cursor=([^&>]+)/)![1];
    expect((await admin.request('GET', `/admin/v1/keys?limit=1&plan=free&cursor=${cursor}`)).status).toBe(200);
    expectError(await admin.request('GET', `/admin/v1/keys?limit=1&plan=pro&cursor=${cursor}`), 400, 'bad_request');
  });

  test('400 for a cursor made for another name or state, as for another plan', async ({ admin }) => {
    const name = `cursor name ${Date.now()}`;
    for (const keyName of [name, name, `${name} b`, `${name} b`]) await createKey(admin, { plan: 'free', name: keyName });
    const cursorOf = async (query: string) =>
      (await admin.request('GET', `/admin/v1/keys?limit=1&${query}`)).headers.get('link')!.match(/cursor=([^&>]+)/)![1]!;

    const byName = await cursorOf(`name=${encodeURIComponent(name)}`);
    expect((await admin.request('GET', `/admin/v1/keys?limit=1&name=${encodeURIComponent(name)}&cursor=${byName}`)).status).toBe(200);
    expectError(
      await admin.request('GET', `/admin/v1/keys?limit=1&name=${encodeURIComponent(`${name} b`)}&cursor=${byName}`),
      400,
      'bad_request',
    );
    expectError(await admin.request('GET', `/admin/v1/keys?limit=1&cursor=${byName}`), 400, 'bad_request');

    const byState = await cursorOf('state=active');
    expect((await admin.request('GET', `/admin/v1/keys?limit=1&state=active&cursor=${byState}`)).status).toBe(200);
    expectError(await admin.request('GET', `/admin/v1/keys?limit=1&state=revoked&cursor=${byState}`), 400, 'bad_request');
    expectError(await admin.request('GET', `/admin/v1/keys?limit=1&cursor=${byState}`), 400, 'bad_request');
  });

  test('get: 200, or 404 for no such key, 400 for no id', async ({ admin }) => {
    const { id } = await createKey(admin);
    expect((await admin.request('GET', `/admin/v1/keys/${id}`)).body.id).toBe(id);
    expectError(await admin.request('GET', '/admin/v1/keys/999999999'), 404, 'not_found');
    expectError(await admin.request('GET', '/admin/v1/keys/abc'), 400, 'bad_request');
    expectError(await admin.request('PUT', `/admin/v1/keys/${id}`), 405, 'method_not_allowed');
  });
});

describe('change, rotate, revoke', () => {
  test("a plan change applies to the key's next request", async ({ t, admin }) => {
    const { id, key } = await createKey(admin, { plan: 'free' });
    await waitForKeyOnApp(t.app, bearer(key));
    const limit = async () => (await t.app.inject({ url: '/v1/pets', headers: bearer(key) })).headers['x-ratelimit-limit'];
    expect(await limit()).toBe('60');
    const changed = await admin.request('PATCH', `/admin/v1/keys/${id}`, { json: { plan: 'pro', name: 'upgraded' } });
    expect(changed.status).toBe(200);
    expect(changed.body).toMatchObject({ id, plan: 'pro', perMinute: 300, perDay: 10_000, name: 'upgraded', state: 'active' });
    await eventually(async () => (await limit()) === '300', 1_000);

    const enterprise = await admin.request('PATCH', `/admin/v1/keys/${id}`, { json: { plan: 'enterprise', perMinute: 7, perDay: 70 } });
    expect(enterprise.body).toMatchObject({ plan: 'enterprise', perMinute: 7, perDay: 70 });
    // An enterprise key keeps its limits unless given new ones.
    expect((await admin.request('PATCH', `/admin/v1/keys/${id}`, { json: { perDay: 700 } })).body).toMatchObject({
      perMinute: 7,
      perDay: 700,
    });
    await eventually(async () => (await limit()) === '7', 1_000);
  });

  test('400 for limits that do not go with the plan or an empty change; 404 for no key; 409 for a revoked or rotated key', async ({
    admin,
  }) => {
    const { id } = await createKey(admin, { plan: 'free' });
    expectError(await admin.request('PATCH', `/admin/v1/keys/${id}`, { json: { plan: 'enterprise' } }), 400, 'bad_request');
    expectError(await admin.request('PATCH', `/admin/v1/keys/${id}`, { json: { perMinute: 5 } }), 400, 'bad_request');
    expectError(await admin.request('PATCH', `/admin/v1/keys/${id}`, { json: {} }), 400, 'bad_request');
    expectError(await admin.request('PATCH', `/admin/v1/keys/${id}`, { json: { readOnly: true } }), 400, 'bad_request');
    expectError(await admin.request('PATCH', '/admin/v1/keys/999999999', { json: { name: 'x' } }), 404, 'not_found');
    const rotated = await admin.request('POST', `/admin/v1/keys/${id}/rotate`, { json: {} });
    expectError(await admin.request('PATCH', `/admin/v1/keys/${id}`, { json: { plan: 'pro' } }), 409, 'conflict');
    await admin.request('POST', `/admin/v1/keys/${rotated.body.id}/revoke`);
    expectError(await admin.request('PATCH', `/admin/v1/keys/${rotated.body.id}`, { json: { plan: 'pro' } }), 409, 'conflict');
  });

  test('rotate: 201 with the new secret; the old key works for the overlap, then not; 0 stops it at once', async ({ t, admin }) => {
    const { id, key: old } = await createKey(admin, { plan: 'enterprise', perMinute: 9, perDay: 90, name: 'rolling', readOnly: true });
    await waitForKeyOnApp(t.app, bearer(old));
    const response = await admin.request('POST', `/admin/v1/keys/${id}/rotate`, { json: { overlapSeconds: 1 } });
    expect(response.status).toBe(201);
    const fresh = response.body;
    expect(fresh).toMatchObject({
      name: 'rolling',
      plan: 'enterprise',
      perMinute: 9,
      perDay: 90,
      readOnly: true,
      quotaId: id,
      state: 'active',
    });
    expect(fresh.key).toMatch(KEY);
    expect(response.headers.get('location')).toBe(`/admin/v1/keys/${fresh.id}`);
    expect((await admin.request('GET', `/admin/v1/keys/${id}`)).body).toMatchObject({ state: 'rotated', replacedBy: fresh.id });
    const status = async (key: string) => (await t.app.inject({ url: '/v1/pets', headers: bearer(key) })).statusCode;
    expect(await status(old)).toBe(200);
    await eventually(async () => (await status(old)) === 401, 3_000);
    await waitForKeyOnApp(t.app, bearer(fresh.key));

    expectError(await admin.request('POST', `/admin/v1/keys/${id}/rotate`, { json: {} }), 409, 'conflict');
    const now = await admin.request('POST', `/admin/v1/keys/${fresh.id}/rotate`, { json: { overlapSeconds: 0 } });
    expect(now.status).toBe(201);
    await eventually(async () => (await status(fresh.key)) === 401, 1_000);
    expect((await admin.request('GET', `/admin/v1/keys/${fresh.id}`)).body.state).toBe('revoked');
    expectError(await admin.request('POST', `/admin/v1/keys/${id}/rotate`, { json: { overlapSeconds: 2_592_001 } }), 400, 'bad_request');
    expectError(await admin.request('POST', '/admin/v1/keys/999999999/rotate', { json: {} }), 404, 'not_found');
  });

  test("a plan or limits change of a rotated key's successor binds the old key in its overlap too", async ({ t, admin }) => {
    const { id, successorId } = await expectSuccessorChangeOnOldKey(admin, t.app);
    const [entry] = (await admin.request('GET', '/admin/v1/audit?limit=1')).body;
    expect(entry).toMatchObject({ action: 'key.update', keyId: successorId, details: { sameQuota: [id] } });
    // A change of name alone is the successor's own.
    await admin.request('PATCH', `/admin/v1/keys/${successorId}`, { json: { name: 'renamed' } });
    expect((await admin.request('GET', `/admin/v1/keys/${id}`)).body.name).toBe('abusive');
  });

  test('rotate without a body keeps the old key working for a day', async ({ admin }) => {
    const { id } = await createKey(admin);
    const rotated = await admin.request('POST', `/admin/v1/keys/${id}/rotate`);
    expect(rotated.status, JSON.stringify(rotated.body)).toBe(201);
    const old = (await admin.request('GET', `/admin/v1/keys/${id}`)).body;
    expect(Date.parse(old.expiresAt) - Date.now()).toBeGreaterThan(86_000_000);
    expect(old.state).toBe('rotated');
  });

  test('revoke takes with it the keys rotated into the revoked one that still work, in the audit trail; never its successor', async ({
    t,
    admin,
  }) => {
    // A chain of three: first rotated into second, second into third, each with the longest overlap.
    const { id: first, key: firstKey } = await createKey(admin, { plan: 'pro', name: 'cancelled' });
    const second = (await admin.request('POST', `/admin/v1/keys/${first}/rotate`, { json: { overlapSeconds: MAX_OVERLAP_SECONDS } })).body;
    const third = (await admin.request('POST', `/admin/v1/keys/${second.id}/rotate`, { json: { overlapSeconds: MAX_OVERLAP_SECONDS } }))
      .body;
    const status = async (key: string) => (await t.app.inject({ url: '/v1/pets?limit=1', headers: bearer(key) })).statusCode;
    for (const key of [firstKey, second.key, third.key]) await waitUntilCached(t.app, bearer(key));

    // A cancellation revokes the customer's current key: the keys rotated into it stop with it.
    const revoked = await admin.request('POST', `/admin/v1/keys/${third.id}/revoke`);
    expect(revoked.body).toMatchObject({ id: third.id, state: 'revoked' });
    await eventually(async () => (await status(firstKey)) === 401 && (await status(second.key)) === 401, 1_000);
    for (const id of [first, second.id]) expect((await admin.request('GET', `/admin/v1/keys/${id}`)).body.state).toBe('revoked');
    const [entry] = (await admin.request('GET', '/admin/v1/audit?limit=1')).body;
    expect(entry).toMatchObject({ action: 'key.revoke', keyId: third.id, details: { sameQuota: [first, second.id] } });

    // Revoking an old key in its overlap ends it early, and not the key that replaced it.
    const { id: old, key: oldKey } = await createKey(admin, { plan: 'pro' });
    const successor = (await admin.request('POST', `/admin/v1/keys/${old}/rotate`, { json: { overlapSeconds: MAX_OVERLAP_SECONDS } })).body;
    await waitUntilCached(t.app, bearer(successor.key));
    await admin.request('POST', `/admin/v1/keys/${old}/revoke`);
    await eventually(async () => (await status(oldKey)) === 401, 1_000);
    expect(await status(successor.key)).toBe(200);
    expect((await admin.request('GET', `/admin/v1/keys/${successor.id}`)).body.state).toBe('active');
    const [own] = (await admin.request('GET', '/admin/v1/audit?limit=1')).body;
    expect(own).toMatchObject({ action: 'key.revoke', keyId: old, details: {} });
  });

  test('a rotation with a shorter overlap shortens the overlap of the keys rotated into the rotated one, in the audit trail', async ({
    t,
    admin,
  }) => {
    const status = async (key: string) => (await t.app.inject({ url: '/v1/pets?limit=1', headers: bearer(key) })).statusCode;
    // first into second with the longest overlap, then second into third at once: first stops with second.
    const { id: first, key: firstKey } = await createKey(admin, { plan: 'pro' });
    const second = (await admin.request('POST', `/admin/v1/keys/${first}/rotate`, { json: { overlapSeconds: MAX_OVERLAP_SECONDS } })).body;
    await waitUntilCached(t.app, bearer(firstKey));
    const third = (await admin.request('POST', `/admin/v1/keys/${second.id}/rotate`, { json: { overlapSeconds: 0 } })).body;
    await eventually(async () => (await status(firstKey)) === 401 && (await status(second.key)) === 401, 1_000);
    expect(await status(third.key)).toBe(200);
    expect((await admin.request('GET', `/admin/v1/keys/${first}`)).body.state).toBe('revoked');
    const [entry] = (await admin.request('GET', '/admin/v1/audit?limit=1')).body;
    expect(entry).toMatchObject({
      action: 'key.rotate',
      keyId: second.id,
      details: { newKeyId: third.id, overlapSeconds: 0, sameQuota: [first] },
    });

    // A shorter overlap, not none: the older key ends no later than the key rotated now.
    const fourth = (await admin.request('POST', `/admin/v1/keys/${third.id}/rotate`, { json: { overlapSeconds: MAX_OVERLAP_SECONDS } }))
      .body;
    await admin.request('POST', `/admin/v1/keys/${fourth.id}/rotate`, { json: { overlapSeconds: 600 } });
    const [thirdNow, fourthNow] = await Promise.all(
      [third.id, fourth.id].map(async (id) => (await admin.request('GET', `/admin/v1/keys/${id}`)).body),
    );
    expect(thirdNow.state).toBe('rotated');
    expect(Date.parse(thirdNow.expiresAt)).toBeLessThanOrEqual(Date.parse(fourthNow.expiresAt));
    expect(Date.parse(fourthNow.expiresAt) - Date.now()).toBeLessThanOrEqual(600_000);
  });

  test('revoke: 200 with the revoked key, effective on the next request; again, the same', async ({ t, admin }) => {
    const { id, key } = await createKey(admin);
    await waitForKeyOnApp(t.app, bearer(key));
    const revoked = await admin.request('POST', `/admin/v1/keys/${id}/revoke`);
    expect(revoked.status).toBe(200);
    expect(revoked.body).toMatchObject({ id, state: 'revoked', revokedAt: expect.any(String) });
    await eventually(async () => (await t.app.inject({ url: '/v1/pets', headers: bearer(key) })).statusCode === 401, 1_000);
    const again = await admin.request('POST', `/admin/v1/keys/${id}/revoke`);
    expect(again.body).toEqual(revoked.body);
    expectError(await admin.request('POST', '/admin/v1/keys/999999999/revoke'), 404, 'not_found');
  });

  test('an empty body under Content-Type: application/json is no body where none is needed; a malformed one stays a 400', async ({
    admin,
  }) => {
    // As clients that set the JSON media type on every request send a revoke.
    const send = (method: 'POST' | 'PATCH' | 'DELETE', url: string, payload: string) =>
      admin.server.inject({ method, url, payload, headers: { ...bearer(admin.write.token), 'content-type': 'application/json' } });
    const { id } = await createKey(admin);
    const revoked = await send('POST', `/admin/v1/keys/${id}/revoke`, '');
    expect(revoked.statusCode, revoked.body).toBe(200);
    expect(revoked.json()).toMatchObject({ id, state: 'revoked' });
    expect((await send('DELETE', `/admin/v1/keys/${id}/ban`, '')).statusCode).toBe(204);
    // Rotate's fields are all optional: an empty body is the defaults, as no body is.
    const { id: rotating } = await createKey(admin);
    const rotated = await send('POST', `/admin/v1/keys/${rotating}/rotate`, '');
    expect(rotated.statusCode, rotated.body).toBe(201);
    const old = (await admin.request('GET', `/admin/v1/keys/${rotating}`)).body;
    expect(Date.parse(old.expiresAt) - Date.now()).toBeGreaterThan(86_000_000);

    const malformed = await send('POST', `/admin/v1/keys/${id}/revoke`, '{');
    expect(malformed.statusCode).toBe(400);
    expect(malformed.json()).toEqual({ code: 'bad_request', message: 'Request body is not valid JSON', status: 400 });
    // Where a field is required, an empty body is still refused.
    for (const [method, url] of [
      ['POST', '/admin/v1/keys'],
      ['PATCH', `/admin/v1/keys/${rotated.json<{ id: number }>().id}`],
    ] as const) {
      const empty = await send(method, url, '');
      expect(empty.statusCode, `${method} ${url}: ${empty.body}`).toBe(400);
    }
  });
});

describe('the audit trail', () => {
  test('records every change with the admin token and request id, newest first, never a secret', async ({ t, admin }) => {
    const created = await admin.request('POST', '/admin/v1/keys', { json: { plan: 'free', name: 'audited' } });
    const { id } = created.body;
    const changed = await admin.request('PATCH', `/admin/v1/keys/${id}`, { json: { plan: 'pro' } });
    const rotated = await admin.request('POST', `/admin/v1/keys/${id}/rotate`, { json: { overlapSeconds: 60 } });
    await admin.request('POST', `/admin/v1/keys/${rotated.body.id}/revoke`);
    // Neither reads nor a refused change are changes.
    await admin.request('GET', `/admin/v1/keys/${id}`);
    await admin.request('PATCH', `/admin/v1/keys/${id}`, { json: { plan: 'pro' }, headers: bearer(admin.read.token) });

    const page = await admin.request('GET', '/admin/v1/audit?limit=4', { headers: bearer(admin.read.token) });
    expect(page.status).toBe(200);
    const writer = admin.write.id;
    expect(page.body).toEqual([
      {
        id: expect.any(Number),
        at: expect.any(String),
        actor: 'admin-api',
        adminTokenId: writer,
        requestId: expect.any(String),
        action: 'key.revoke',
        keyId: rotated.body.id,
        // The key rotated into it, still in its overlap, was revoked with it.
        details: { sameQuota: [id] },
      },
      {
        id: expect.any(Number),
        at: expect.any(String),
        actor: 'admin-api',
        adminTokenId: writer,
        requestId: rotated.headers.get('x-request-id'),
        action: 'key.rotate',
        keyId: id,
        details: { newKeyId: rotated.body.id, overlapSeconds: 60 },
      },
      {
        id: expect.any(Number),
        at: expect.any(String),
        actor: 'admin-api',
        adminTokenId: writer,
        requestId: changed.headers.get('x-request-id'),
        action: 'key.update',
        keyId: id,
        details: {
          before: { plan: 'free', perMinute: 60, perDay: 1_000, name: 'audited' },
          after: { plan: 'pro', perMinute: 300, perDay: 10_000, name: 'audited' },
        },
      },
      {
        id: expect.any(Number),
        at: expect.any(String),
        actor: 'admin-api',
        adminTokenId: writer,
        requestId: created.headers.get('x-request-id'),
        action: 'key.create',
        keyId: id,
        details: { plan: 'free', name: 'audited', perMinute: 60, perDay: 1_000, expiresAt: null, readOnly: false },
      },
    ]);
    const next = page.headers.get('link')!.match(/^<([^>]+)>; rel="next"$/)![1]!;
    const older = await admin.request('GET', next);
    expect(older.body[0].id).toBeLessThan(page.body[3].id);

    const everything = JSON.stringify(await t.db.query('SELECT * FROM admin_audit')) + JSON.stringify(t.logs.entries());
    expect(everything).not.toContain(created.body.key);
    expect(everything).not.toContain(admin.write.token);
    // Each admin request's log line names its token.
    expect(t.logs.entries().some((entry) => entry.adminTokenId === writer && entry.route === '/admin/v1/keys/:id/rotate')).toBe(true);
  });
});

describe('the development key', () => {
  test('is in the audit trail, as issued by the development key greeting', async () => {
    // An embedded database with no keys yet: a newcomer's first start.
    const app = await buildApp(loadConfig({ DATABASE_URL: '', DATA_DIR: 'memory://' }), { logStream: captureLogs().stream });
    try {
      expect(await developmentKeyGreeting(app)).toMatch(/psk_/);
      const [key] = await app.apiKeysRepository.list();
      const admin = await openAdmin(app);
      try {
        const trail = (await admin.request('GET', '/admin/v1/audit?limit=100')).body as Array<{ action: string; keyId: number | null }>;
        expect(trail.find((entry) => entry.action === 'key.create' && entry.keyId === key!.id)).toMatchObject({
          actor: 'system:development-key',
          adminTokenId: null,
          requestId: null,
          details: { plan: 'business', name: 'development' },
        });
      } finally {
        await admin.close();
      }
    } finally {
      await app.close();
    }
  });
});

// Usage and bans, read from and lifted in each store the limiter may use, on a clock that stands still so windows hold.
describe.each([
  { ...RATE_LIMIT_STORES[0]!, source: 'memory' },
  { ...RATE_LIMIT_STORES[1]!, source: 'redis' },
  // Redis configured and unreachable (nothing listens on port 1): the limiter counts in memory, and usage says so.
  { name: 'unreachable Redis', usesRedis: false, env: () => ({ REDIS_URL: 'redis://127.0.0.1:1' }), source: 'memory' },
])('usage and bans with the $name store', ({ usesRedis, env, source }) => {
  const test = describeAppTest({ clock: T0, env: { RATE_LIMIT_BAN_THRESHOLD: '1' }, envAtBuild: env }).extend(
    'admin',
    async ({ t }, { onCleanup }) => {
      const admin = await openAdmin(t.app);
      onCleanup(admin.close);
      return admin;
    },
  );

  describe.skipIf(usesRedis && !REDIS_URL)('', () => {
    test('usage shows both windows and the ban from the store the limiter decides with; lifting the ban ends it there', async ({
      t,
      clock,
      admin,
    }) => {
      const { id, key } = await createKey(admin, { plan: 'enterprise', perMinute: 3, perDay: 100 });
      // The first request that finds the key counts; the 401s before it count against the address.
      await waitForKeyOnApp(t.app, bearer(key));
      const get = async () => (await t.app.inject({ url: '/v1/pets', headers: bearer(key) })).json<{ code?: string }>();
      await get();
      await get();
      const usage = async () => (await admin.request('GET', `/admin/v1/keys/${id}/usage`, { headers: bearer(admin.read.token) })).body;
      const minuteEnds = new Date(T0 + MINUTE).toISOString();
      const dayEnds = new Date(T0 - (T0 % DAY) + DAY).toISOString();
      expect(await usage()).toEqual({
        minute: { limit: 3, used: 3, resetAt: minuteEnds },
        day: { limit: 100, used: 3, resetAt: dayEnds },
        bannedUntil: null,
        source,
      });
      // Reading usage counts nothing.
      expect((await usage()).minute.used).toBe(3);
      if (usesRedis) expect(await countKeys(REDIS_URL!, t.app.config.REDIS_KEY_PREFIX)).toBeGreaterThan(0);

      // Threshold 1: the second refusal in the minute starts a ban of RATE_LIMIT_BAN_SECONDS (900).
      expect((await get()).code).toBe('rate_limited');
      expect((await get()).code).toBe('api_key_banned');
      expect((await usage()).bannedUntil).toBe(new Date(T0 + 900_000).toISOString());

      const lifted = await admin.request('DELETE', `/admin/v1/keys/${id}/ban`);
      expect(lifted.status).toBe(204);
      expect(await usage()).toMatchObject({ bannedUntil: null, minute: { used: 3 } });
      // No longer banned: the minute is still spent, so the next request is limited, and the one after the minute is served.
      expect((await get()).code).toBe('rate_limited');
      clock.advance(MINUTE);
      expect((await t.app.inject({ url: '/v1/pets', headers: bearer(key) })).statusCode).toBe(200);
      expect((await admin.request('DELETE', `/admin/v1/keys/${id}/ban`)).status).toBe(204);

      const [entry] = (await admin.request('GET', '/admin/v1/audit?limit=1')).body;
      expect(entry).toMatchObject({ action: 'key.ban_lift', keyId: id, adminTokenId: admin.write.id, details: { source } });
      expectError(await admin.request('GET', '/admin/v1/keys/999999999/usage'), 404, 'not_found');
      expectError(await admin.request('DELETE', '/admin/v1/keys/999999999/ban'), 404, 'not_found');
    });

    test('lists the banned addresses from the store the limiter decides with, and lifts the ban of one there', async ({
      t,
      clock,
      admin,
    }) => {
      clock.advance(DAY);
      const now = clock.now();
      const send = async (address: string) =>
        (await t.app.inject({ url: '/v1/pets', remoteAddress: address })).json<{ code: string }>().code;
      // Threshold 1: 60 requests without a key, then a refusal, and the second refusal starts a ban.
      for (const address of ['192.0.2.9', '2001:db8:5:6::7']) {
        for (let i = 0; i < 61; i++) await send(address);
        expect(await send(address)).toBe('api_key_banned');
      }
      const bannedUntil = new Date(now + 900_000).toISOString();
      const listed = await admin.request('GET', '/admin/v1/address-bans', { headers: bearer(admin.read.token) });
      expect(listed.status).toBe(200);
      expect(listed.body).toEqual({
        bans: [
          { address: '192.0.2.9', bannedUntil },
          { address: '2001:db8:5:6::/64', bannedUntil },
        ],
        source,
      });

      // Any address of the /64 names it; so does the listed form.
      expect((await admin.request('DELETE', `/admin/v1/address-bans/${encodeURIComponent('2001:db8:5:6::ffff')}`)).status).toBe(204);
      expect(await send('2001:db8:5:6::7')).toBe('rate_limited');
      expect((await admin.request('GET', '/admin/v1/address-bans')).body.bans).toEqual([{ address: '192.0.2.9', bannedUntil }]);
      const [entry] = (await admin.request('GET', '/admin/v1/audit?limit=1')).body;
      expect(entry).toMatchObject({
        action: 'address.ban_lift',
        keyId: null,
        adminTokenId: admin.write.id,
        details: { address: '2001:db8:5:6::/64', bannedUntil, source },
      });
      expect((await admin.request('DELETE', `/admin/v1/address-bans/${encodeURIComponent('192.0.2.9')}`)).status).toBe(204);
      expect((await admin.request('GET', '/admin/v1/address-bans')).body.bans).toEqual([]);
      expect((await admin.request('DELETE', `/admin/v1/address-bans/${encodeURIComponent('192.0.2.9')}`)).status).toBe(204);
      expectError(await admin.request('DELETE', '/admin/v1/address-bans/not-an-address'), 400, 'bad_request');
    });

    test('a rotated key and its successor show one quota', async ({ t, admin }) => {
      const { id, key } = await createKey(admin, { plan: 'free' });
      await waitForKeyOnApp(t.app, bearer(key));
      const rotated = await admin.request('POST', `/admin/v1/keys/${id}/rotate`, { json: { overlapSeconds: 600 } });
      await waitForKeyOnApp(t.app, bearer(rotated.body.key));
      const used = async (keyId: number) => (await admin.request('GET', `/admin/v1/keys/${keyId}/usage`)).body.minute.used;
      expect([await used(id), await used(rotated.body.id)]).toEqual([2, 2]);
    });
  });
});

describe.skipIf(!REDIS_URL)('usage during a Redis outage (a private Redis server)', () => {
  test("answers from this instance's memory and says so, and from Redis again once it is back", async () => {
    const redis = await startRedis();
    const clock = testClock(T0);
    const t = await buildTestApp({ REDIS_URL: redis.url, REDIS_KEY_PREFIX: 'outage:' }, { now: clock.now });
    const admin = await openAdmin(t.app);
    try {
      const { id, key } = await createKey(admin, { plan: 'free' });
      await waitForKeyOnApp(t.app, bearer(key));
      const get = async () => (await t.app.inject({ url: '/v1/pets', headers: bearer(key) })).statusCode;
      expect(await get()).toBe(200);
      const usage = async () => (await admin.request('GET', `/admin/v1/keys/${id}/usage`)).body;
      expect(await usage()).toMatchObject({ source: 'redis', minute: { used: 2 }, day: { used: 2 } });

      await redis.stop();
      // The first decision that fails moves the limiter to memory, which has counted nothing of this key before.
      expect(await get()).toBe(200);
      expect(await usage()).toMatchObject({ source: 'memory', minute: { used: 1 }, day: { used: 1 } });
      expect(t.logs.entries().some((entry) => String(entry.msg).includes('Redis unreachable'))).toBe(true);

      await redis.start();
      // Redis came back empty; once the probe finds it, counting and usage are there again.
      await eventually(async () => (await usage()).source === 'redis', 5_000);
      expect(await get()).toBe(200);
      expect(await usage()).toMatchObject({ source: 'redis', minute: { used: 1 } });
    } finally {
      await admin.close();
      await t.close();
      await redis.stop().catch(() => {});
    }
  });
});

const twoInstances = twoInstancesTest();

describe.runIf(POSTGRES_URL)('two instances', () => {
  twoInstances(
    'a plan change and a revocation made through the admin API take effect on the other instance within a second',
    async ({ instances: { a, b } }) => {
      const admin = await openAdmin(a.app);
      try {
        const created = await admin.request('POST', '/admin/v1/keys', { json: { plan: 'free' } });
        const { id, key } = created.body;
        await waitForKeyOnApp(b.app, bearer(key));
        const limitOnB = async () => (await b.app.inject({ url: '/v1/pets', headers: bearer(key) })).headers['x-ratelimit-limit'];
        expect(await limitOnB()).toBe('60');
        expect((await admin.request('PATCH', `/admin/v1/keys/${id}`, { json: { plan: 'business' } })).status).toBe(200);
        const changedMs = await eventually(async () => (await limitOnB()) === '1000', 1_000);
        expect((await admin.request('POST', `/admin/v1/keys/${id}/revoke`)).status).toBe(200);
        const revokedMs = await eventually(
          async () => (await b.app.inject({ url: '/v1/pets', headers: bearer(key) })).statusCode === 401,
          1_000,
        );
        console.log(`through the admin API: plan change on the other instance after ${changedMs} ms, revocation after ${revokedMs} ms`);
      } finally {
        await admin.close();
      }
    },
  );

  twoInstances(
    "a revocation of a rotated key's successor reaches the old key cached on the other instance",
    async ({ instances: { a, b } }) => {
      const admin = await openAdmin(a.app);
      try {
        const { id, key: old } = await createKey(admin, { plan: 'pro' });
        const successor = await admin.request('POST', `/admin/v1/keys/${id}/rotate`, { json: { overlapSeconds: MAX_OVERLAP_SECONDS } });
        await waitForKeyOnApp(b.app, bearer(old));
        await waitUntilCached(b.app, bearer(old));
        expect((await admin.request('POST', `/admin/v1/keys/${successor.body.id}/revoke`)).status).toBe(200);
        await eventually(async () => (await b.app.inject({ url: '/v1/pets?limit=1', headers: bearer(old) })).statusCode === 401, 1_000);
      } finally {
        await admin.close();
      }
    },
  );

  twoInstances(
    "a limits change of a rotated key's successor reaches the old key cached on the other instance",
    async ({ instances: { a, b } }) => {
      const admin = await openAdmin(a.app);
      try {
        await expectSuccessorChangeOnOldKey(admin, b.app);
      } finally {
        await admin.close();
      }
    },
  );
});

describe('the admin listener as an HTTP server', () => {
  test('closes the connection of a client without a token that trickles its body, as the API does', async ({ admin }) => {
    const { port } = admin.server.server.address() as AddressInfo;
    const client = await openSocket(port);
    client.socket.write('POST /admin/v1/keys HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"pl');
    await eventually(async () => client.received.includes('\r\n\r\n'));
    expect(client.received).toMatch(/^HTTP\/1\.1 401 /);
    expect(client.received.toLowerCase()).toContain('connection: close');
    expect(await closedWithin(client, 2_000)).toBe(true);
  });
});
