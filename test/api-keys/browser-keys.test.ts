import { describe, expect } from 'vitest';
import { adminTest, createKey, expectError, type TestAdmin } from '../support/admin.js';
import { eventually } from '../support/eventually.js';
import { bearer, waitForKeyOnApp } from '../support/keys.js';
import { T0 } from '../support/time.js';

// A clock standing still: a test's requests share one minute of the key's windows, so what each costs can be counted.
const test = adminTest({ clock: T0 });

const SHOP = 'https://shop.example.com';
const DEV = 'http://localhost:5173';
const OTHER = 'https://copycat.example';

const newestAudit = async (admin: TestAdmin) => (await admin.request('GET', '/admin/v1/audit?limit=1')).body[0];

describe('allowedOrigins in the admin API', () => {
  test('set on create and shown; kept by a rotation; changed and cleared (null) by PATCH, on the key and the old one in its overlap; audited', async ({
    admin,
  }) => {
    const created = await createKey(admin, { plan: 'free', readOnly: true, allowedOrigins: [SHOP, DEV] });
    expect(created).toMatchObject({ allowedOrigins: [SHOP, DEV], readOnly: true });
    const { id } = created;
    expect((await admin.request('GET', `/admin/v1/keys/${id}`)).body.allowedOrigins).toEqual([SHOP, DEV]);
    expect(await newestAudit(admin)).toMatchObject({ action: 'key.create', keyId: id, details: { allowedOrigins: [SHOP, DEV] } });

    const rotated = await admin.request('POST', `/admin/v1/keys/${id}/rotate`, { json: { overlapSeconds: 3_600 } });
    expect(rotated.status).toBe(201);
    expect(rotated.body).toMatchObject({ allowedOrigins: [SHOP, DEV], readOnly: true });
    const successor = rotated.body.id as number;

    const narrowed = await admin.request('PATCH', `/admin/v1/keys/${successor}`, { json: { allowedOrigins: [SHOP] } });
    expect(narrowed.status, JSON.stringify(narrowed.body)).toBe(200);
    expect(narrowed.body.allowedOrigins).toEqual([SHOP]);
    // The old key still in its overlap is bound as its successor is: a page's copy of it is no way around the change.
    expect((await admin.request('GET', `/admin/v1/keys/${id}`)).body.allowedOrigins).toEqual([SHOP]);
    expect(await newestAudit(admin)).toMatchObject({
      action: 'key.update',
      keyId: successor,
      details: { before: { allowedOrigins: [SHOP, DEV] }, after: { allowedOrigins: [SHOP] }, sameQuota: [id] },
    });

    const cleared = await admin.request('PATCH', `/admin/v1/keys/${successor}`, { json: { allowedOrigins: null } });
    expect(cleared.body.allowedOrigins).toBeNull();
    expect(await newestAudit(admin)).toMatchObject({ details: { before: { allowedOrigins: [SHOP] }, after: { allowedOrigins: null } } });
    // Nothing to change: nothing recorded.
    const audited = await newestAudit(admin);
    expect((await admin.request('PATCH', `/admin/v1/keys/${successor}`, { json: { allowedOrigins: null } })).status).toBe(200);
    expect(await newestAudit(admin)).toEqual(audited);

    // A key made without them may be used from anywhere, and says so.
    expect((await createKey(admin, { plan: 'free' })).allowedOrigins).toBeNull();
  });

  test('bad origins are a 400 naming the field, on create and on change; nothing is written', async ({ t, admin }) => {
    const many = Array.from({ length: 21 }, (_, i) => `https://shop${i}.example.com`);
    const cases: Array<[unknown, string]> = [
      [[], 'body/allowedOrigins must be a list of 1 to 20 web origins, or null'],
      [many, 'body/allowedOrigins must be a list of 1 to 20 web origins, or null'],
      [[SHOP, 'https://A.com'], 'body/allowedOrigins/1 "https://A.com" is not an origin as browsers send it; write "https://a.com"'],
      [['https://a.com:443'], 'body/allowedOrigins/0 "https://a.com:443" is not an origin as browsers send it; write "https://a.com"'],
      [['https://a.com/'], 'body/allowedOrigins/0 must be a web origin, scheme://host[:port], as browsers send it in Origin'],
      [['not a URL'], 'body/allowedOrigins/0 must be a web origin, scheme://host[:port], as browsers send it in Origin'],
      [['https://a.com:99999'], 'body/allowedOrigins/0 "https://a.com:99999" is not a web origin (scheme://host[:port])'],
      [[SHOP, DEV, SHOP], `body/allowedOrigins/2 repeats "${SHOP}": each origin is listed once`],
      [SHOP, 'body/allowedOrigins must be a list of 1 to 20 web origins, or null'],
    ];
    const { id } = await createKey(admin, { plan: 'free', allowedOrigins: [DEV] });
    const before = await t.app.apiKeysRepository.list();
    const audited = await newestAudit(admin);
    for (const [allowedOrigins, message] of cases) {
      const created = await admin.request('POST', '/admin/v1/keys', { json: { plan: 'free', allowedOrigins } });
      expectError(created, 400, 'bad_request');
      expect(created.body.message, JSON.stringify(allowedOrigins)).toBe(message);
      const changed = await admin.request('PATCH', `/admin/v1/keys/${id}`, { json: { allowedOrigins } });
      expectError(changed, 400, 'bad_request');
      expect(changed.body.message, JSON.stringify(allowedOrigins)).toBe(message);
    }
    expect(await t.app.apiKeysRepository.list()).toEqual(before);
    expect(await newestAudit(admin)).toEqual(audited);
    // Twenty is the most.
    const twenty = await createKey(admin, { plan: 'free', allowedOrigins: many.slice(0, 20) });
    expect(twenty.allowedOrigins).toHaveLength(20);
  });
});

describe('a browser key on /v1', () => {
  test('served from its own origins; from another, or with no Origin, a 403 origin_not_allowed counted against its limits', async ({
    t,
    admin,
  }) => {
    const { key } = await createKey(admin, { plan: 'free', readOnly: true, allowedOrigins: [SHOP, DEV] });
    await waitForKeyOnApp(t.app, bearer(key));
    const get = (origin?: string) =>
      t.app.inject({ url: '/v1/pets?limit=1', headers: { ...bearer(key), ...(origin === undefined ? {} : { origin }) } });
    const remaining = async (origin?: string) => Number((await get(origin)).headers['x-ratelimit-remaining']);

    const first = await get(SHOP);
    expect(first.statusCode).toBe(200);
    const left = Number(first.headers['x-ratelimit-remaining']);
    expect((await get(DEV)).statusCode).toBe(200);

    const foreign = await get(OTHER);
    expect(foreign.statusCode).toBe(403);
    expect(foreign.json()).toEqual({
      code: 'origin_not_allowed',
      message: `This API key may not be used from ${OTHER}: it is bound to other web origins`,
      status: 403,
    });
    expect(Number(foreign.headers['x-ratelimit-remaining'])).toBe(left - 2);
    const none = await get();
    expect(none.statusCode).toBe(403);
    expect(none.json()).toEqual({
      code: 'origin_not_allowed',
      message: 'This API key may only be used from the web origins it is bound to, and the request has no Origin',
      status: 403,
    });
    // Compared exactly, as browsers send Origin: no other case, path, port or scheme; nor the opaque origin "null".
    for (const near of ['https://SHOP.example.com', `${SHOP}/`, `${SHOP}:443`, 'http://shop.example.com', 'null', `${SHOP}, ${DEV}`]) {
      expect((await get(near)).statusCode, near).toBe(403);
    }
    // Every refusal was counted: as the read-only key's 403 is, a refusal is no free probe.
    expect(await remaining(SHOP)).toBe(left - 10);
    // The quota read too is refused elsewhere, and its own origin still reads it.
    expect((await t.app.inject({ url: '/v1/rate_limit', headers: { ...bearer(key), origin: OTHER } })).statusCode).toBe(403);
    expect((await t.app.inject({ url: '/v1/rate_limit', headers: { ...bearer(key), origin: SHOP } })).statusCode).toBe(200);
  });

  test('over real HTTP: its own origin served, another refused, the refusal with its rate-limit headers', async ({ t, admin, request }) => {
    const { key } = await createKey(admin, { plan: 'free', allowedOrigins: [DEV] });
    await waitForKeyOnApp(t.app, bearer(key));
    const served = await request('GET', '/v1/pets?limit=1', { headers: { ...bearer(key), origin: DEV } });
    expect(served.status).toBe(200);
    const refused = await request('GET', '/v1/pets?limit=1', { headers: { ...bearer(key), origin: SHOP } });
    expect(refused.status).toBe(403);
    expect(refused.body.code).toBe('origin_not_allowed');
    // Readable by the page that was refused (CORS_ORIGINS is any origin by default), so its developer sees why.
    expect(refused.headers.get('access-control-allow-origin')).toBe('*');
    expect(Number(refused.headers.get('x-ratelimit-remaining'))).toBe(Number(served.headers.get('x-ratelimit-remaining')) - 1);
    // A write from another origin is refused for its origin, before the scope or the body is looked at.
    const write = await request('POST', '/v1/pets', {
      headers: { ...bearer(key), origin: SHOP },
      json: { name: 'Copycat', categoryId: 1 },
    });
    expect(write.body.code).toBe('origin_not_allowed');
    expect((await t.db.query("SELECT 1 FROM pets WHERE name = 'Copycat'")).length).toBe(0);
  });

  test('a read-only browser key writing from its own origin is a 403 forbidden, as any read-only key', async ({ t, admin }) => {
    const { key } = await createKey(admin, { plan: 'free', readOnly: true, allowedOrigins: [SHOP] });
    await waitForKeyOnApp(t.app, bearer(key));
    const write = await t.app.inject({
      method: 'POST',
      url: '/v1/pets',
      headers: { ...bearer(key), origin: SHOP },
      payload: { name: 'Nope', categoryId: 1 },
    });
    expect(write.statusCode).toBe(403);
    expect(write.json().code).toBe('forbidden');
  });

  test('a key without allowedOrigins is unaffected by Origin: served with any, or none', async ({ t, admin }) => {
    const { key } = await createKey(admin, { plan: 'free' });
    await waitForKeyOnApp(t.app, bearer(key));
    for (const origin of [undefined, SHOP, OTHER, 'null']) {
      const response = await t.app.inject({ url: '/v1/pets?limit=1', headers: { ...bearer(key), ...(origin && { origin }) } });
      expect(response.statusCode, String(origin)).toBe(200);
    }
  });

  test('a change binds the key, or frees it, on its next requests once the change notice arrives', async ({ t, admin }) => {
    const { id, key } = await createKey(admin, { plan: 'free' });
    await waitForKeyOnApp(t.app, bearer(key));
    const status = async (origin: string) =>
      (await t.app.inject({ url: '/v1/pets?limit=1', headers: { ...bearer(key), origin } })).statusCode;
    expect(await status(OTHER)).toBe(200);
    expect((await admin.request('PATCH', `/admin/v1/keys/${id}`, { json: { allowedOrigins: [SHOP] } })).status).toBe(200);
    await eventually(async () => (await status(OTHER)) === 403, 1_000);
    expect(await status(SHOP)).toBe(200);
    expect((await admin.request('PATCH', `/admin/v1/keys/${id}`, { json: { allowedOrigins: null } })).status).toBe(200);
    await eventually(async () => (await status(OTHER)) === 200, 1_000);
  });
});
