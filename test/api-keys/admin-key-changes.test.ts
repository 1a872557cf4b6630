import type { FastifyInstance } from 'fastify';
import { describe, expect } from 'vitest';
import { MAX_OVERLAP_SECONDS } from '../../src/api-keys/lifecycle.js';
import { adminTest, createKey, expectError, openAdmin, type TestAdmin } from '../support/admin.js';
import { POSTGRES_URL } from '../support/databases.js';
import { eventually } from '../support/eventually.js';
import { twoInstancesTest } from '../support/fixtures.js';
import { bearer, KEY, waitForKeyOnApp, waitUntilCached } from '../support/keys.js';

const test = adminTest();

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

  test('400 for a plan without limits and none given, or an empty change; 404 for no key; 409 for a revoked or rotated key', async ({
    admin,
  }) => {
    const { id } = await createKey(admin, { plan: 'free' });
    expectError(await admin.request('PATCH', `/admin/v1/keys/${id}`, { json: { plan: 'enterprise' } }), 400, 'bad_request');
    expectError(await admin.request('PATCH', `/admin/v1/keys/${id}`, { json: { plan: 'enterprise', limits: null } }), 400, 'bad_request');
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
