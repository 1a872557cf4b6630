import { describe, expect } from 'vitest';
import { createAdminTokensRepository } from '../../src/admin/tokens-repository.js';
import { adminTest, createKey, expectError, KEYS_COMMAND } from '../support/admin.js';
import { bearer, KEY, waitForKeyOnApp } from '../support/keys.js';
import { minuteAndDay } from '../../src/plans/limits.js';

// A create costs 5 units: a key's own limits must hold that much.
const test = adminTest({ env: { RATE_LIMIT_COSTS: 'createPet=5' } });

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
      // The short form makes windows of its own, named minute and day.
      limits: minuteAndDay(500, 50_000),
      perMinute: 500,
      perDay: 50_000,
      readOnly: false,
      allowedOrigins: null,
      enforceLimits: true,
      concurrency: null,
      state: 'active',
      createdAt: expect.any(String),
      expiresAt: '2099-01-31T00:00:00.000Z',
      revokedAt: null,
      replacedBy: null,
      quotaId: created.id,
      customerId: null,
      credits: null,
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

  test("enforceLimits and concurrency: set on create, changed by PATCH (null: the plan's again), kept by a rotation, checked", async ({
    t,
    admin,
  }) => {
    const created = await createKey(admin, { plan: 'free', enforceLimits: false, concurrency: 2 });
    expect(created).toMatchObject({ enforceLimits: false, concurrency: 2 });
    const { id } = created;
    const rotated = await admin.request('POST', `/admin/v1/keys/${id}/rotate`, { json: { overlapSeconds: 3600 } });
    expect(rotated.body).toMatchObject({ enforceLimits: false, concurrency: 2 });
    // A change of the newest key reaches the old one still in its overlap, as the plan does.
    const changed = await admin.request('PATCH', `/admin/v1/keys/${rotated.body.id}`, { json: { enforceLimits: true, concurrency: null } });
    expect(changed.status, JSON.stringify(changed.body)).toBe(200);
    expect(changed.body).toMatchObject({ enforceLimits: true, concurrency: null });
    expect((await admin.request('GET', `/admin/v1/keys/${id}`)).body).toMatchObject({ enforceLimits: true, concurrency: null });
    await waitForKeyOnApp(t.app, bearer(rotated.body.key));
    const standing = await t.app.inject({ url: '/v1/rate_limit', headers: bearer(rotated.body.key) });
    expect(standing.json().concurrency).toEqual({ limit: 5, inFlight: 0 });

    for (const json of [{ concurrency: 0 }, { concurrency: 100_001 }, { concurrency: 1.5 }, { enforceLimits: 'no' }]) {
      const refused = await admin.request('PATCH', `/admin/v1/keys/${rotated.body.id}`, { json });
      expectError(refused, 400, 'bad_request');
      expect(refused.body.message, JSON.stringify(json)).toContain(`body/${Object.keys(json)[0]}`);
    }
  });

  test('400 for a plan without limits and none given, a plan not in the table, unknown fields, a past expiry and bad values; nothing is created', async ({
    t,
    admin,
  }) => {
    const before = (await t.app.apiKeysRepository.list()).length;
    for (const [json, field] of [
      [{ plan: 'enterprise' }, 'body the enterprise plan has no limits of its own'],
      [{ plan: 'enterprise', limits: null }, 'body the enterprise plan has no limits of its own'],
      [{ plan: 'gold' }, 'body/plan is gold, which names no plan'],
      [{ plan: 'Gold' }, 'body/plan must be a lower-case letter'],
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

describe('limits below an operation’s cost', () => {
  test('create and PATCH: 400 naming the limit an operation costs more than; nothing is created or changed', async ({ t, admin }) => {
    const before = (await t.app.apiKeysRepository.list()).length;
    for (const [json, field, limit] of [
      [{ plan: 'enterprise', perMinute: 4, perDay: 100 }, 'perMinute', 4],
      [{ plan: 'enterprise', perMinute: 10, perDay: 3 }, 'perDay', 3],
    ] as const) {
      const refused = await admin.request('POST', '/admin/v1/keys', { json });
      expectError(refused, 400, 'bad_request');
      expect(refused.body.message).toBe(
        `body/${field} is ${limit}, less than the 5 units createPet costs (RATE_LIMIT_COSTS): a key with it could never call it`,
      );
    }
    expect((await t.app.apiKeysRepository.list()).length).toBe(before);

    const { id } = await createKey(admin, { plan: 'enterprise', perMinute: 5, perDay: 100 });
    for (const [json, field] of [
      [{ perMinute: 4 }, 'perMinute'],
      [{ perDay: 4 }, 'perDay'],
    ] as const) {
      const refused = await admin.request('PATCH', `/admin/v1/keys/${id}`, { json });
      expectError(refused, 400, 'bad_request');
      expect(refused.body.message).toContain(`body/${field} is 4, less than the 5 units createPet costs`);
    }
    expect((await admin.request('GET', `/admin/v1/keys/${id}`)).body).toMatchObject({ perMinute: 5, perDay: 100 });
    // Limits that fit, and the plans' own (checked at start), are taken.
    expect((await admin.request('PATCH', `/admin/v1/keys/${id}`, { json: { perMinute: 6 } })).body).toMatchObject({ perMinute: 6 });
    expect((await admin.request('PATCH', `/admin/v1/keys/${id}`, { json: { plan: 'free' } })).body).toMatchObject({ perMinute: 60 });
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
    for (const query of ['state=lost', 'plan=Gold', 'limit=0', 'limit=101', 'cursor=garbage!']) {
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
