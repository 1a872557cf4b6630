import { describe, expect } from 'vitest';
import { lockPlan } from '../../src/plans/rules.js';
import { adminTest, createKey, expectError, type TestAdmin } from '../support/admin.js';

const test = adminTest();

const MINUTE = { name: 'minute', limit: 100, windowSeconds: 60 };
const SECOND = { name: 'burst', limit: 10, windowSeconds: 1, algorithm: 'sliding' };

/** Creates a plan through the API with the write token. */
async function createPlan(admin: TestAdmin, body: Record<string, unknown>) {
  const response = await admin.request('POST', '/admin/v1/plans', { json: body });
  expect(response.status, JSON.stringify(response.body)).toBe(201);
  return response.body as { name: string; limits: unknown; concurrency: number | null; shadow: boolean; createdAt: string };
}

/** The audit trail's newest entries, newest first. */
const newestAudit = async (admin: TestAdmin, limit = 1) => (await admin.request('GET', `/admin/v1/audit?limit=${limit}`)).body;

/** A working key of the plan: made on free through the API, then moved (the keys' rules do not take any plan yet). */
async function keyOfPlan(
  { t, admin }: { t: { db: { query: (sql: string, values: unknown[]) => Promise<unknown> } }; admin: TestAdmin },
  plan: string,
) {
  const { id } = await createKey(admin, { plan: 'free' });
  await t.db.query('UPDATE api_keys SET plan = $2 WHERE id = $1', [id, plan]);
  return id;
}

describe('list and get', () => {
  test('the seed plans, by name, with the limits the code held and the concurrency RATE_LIMIT_CONCURRENCY defaulted to', async ({
    admin,
  }) => {
    const response = await admin.request('GET', '/admin/v1/plans');
    expect(response.status).toBe(200);
    const seed = (response.body as { name: string }[]).filter(({ name }) => ['business', 'enterprise', 'free', 'pro'].includes(name));
    const window = (name: string, limit: number, windowSeconds: number) => ({ name, limit, windowSeconds, algorithm: 'fixed' });
    const plan = (name: string, limits: unknown, concurrency: number) => ({
      name,
      limits,
      concurrency,
      shadow: false,
      createdAt: expect.any(String),
      updatedAt: expect.any(String),
    });
    expect(seed).toEqual([
      plan('business', [window('minute', 1000, 60), window('day', 100_000, 86_400)], 50),
      plan('enterprise', null, 100),
      plan('free', [window('minute', 60, 60), window('day', 1000, 86_400)], 5),
      plan('pro', [window('minute', 300, 60), window('day', 10_000, 86_400)], 20),
    ]);
    expect((await admin.request('GET', '/admin/v1/plans/free', { headers: { authorization: `Bearer ${admin.read.token}` } })).body).toEqual(
      seed[2],
    );
  });

  test('404 not_found for a plan that does not exist; 400 naming params/name for a bad name', async ({ admin }) => {
    expectError(await admin.request('GET', '/admin/v1/plans/nosuch'), 404, 'not_found');
    const bad = await admin.request('GET', '/admin/v1/plans/Bad');
    expectError(bad, 400, 'bad_request');
    expect(bad.body.message).toMatch(/^params\/name /);
  });
});

describe('create', () => {
  test('201 with a Location and the plan, windows shortest first with their algorithm; audited', async ({ admin }) => {
    const response = await admin.request('POST', '/admin/v1/plans', { json: { name: 'gold', limits: [MINUTE, SECOND], concurrency: 9 } });
    expect(response.status, JSON.stringify(response.body)).toBe(201);
    expect(response.headers.get('location')).toBe('/admin/v1/plans/gold');
    const limits = [SECOND, { ...MINUTE, algorithm: 'fixed' }];
    expect(response.body).toEqual({
      name: 'gold',
      limits,
      concurrency: 9,
      shadow: false,
      createdAt: expect.any(String),
      updatedAt: response.body.createdAt,
    });
    expect((await admin.request('GET', '/admin/v1/plans/gold')).body).toEqual(response.body);
    const [entry] = await newestAudit(admin);
    expect(entry).toMatchObject({
      actor: 'admin-api',
      adminTokenId: admin.write.id,
      action: 'plan.create',
      keyId: null,
      details: { plan: 'gold', limits, concurrency: 9, shadow: false },
    });
  });

  test('a plan whose keys carry their own limits (limits null), in shadow mode', async ({ admin }) => {
    expect(await createPlan(admin, { name: 'partners-2', limits: null, shadow: true })).toMatchObject({
      limits: null,
      concurrency: null,
      shadow: true,
    });
  });

  test('409 conflict for a taken name; nothing audited', async ({ admin }) => {
    const [audited] = await newestAudit(admin);
    const refused = await admin.request('POST', '/admin/v1/plans', { json: { name: 'free', limits: [MINUTE] } });
    expectError(refused, 409, 'conflict');
    expect(refused.body.message).toBe('plan free exists already');
    expect((await newestAudit(admin))[0]).toEqual(audited);
  });

  test('a retry with the Idempotency-Key gets the same plan and creates no second one', async ({ admin }) => {
    const headers = { 'idempotency-key': 'plan-sync-1' };
    const first = await admin.request('POST', '/admin/v1/plans', { json: { name: 'silver', limits: [MINUTE] }, headers });
    expect(first.status).toBe(201);
    const [audited] = await newestAudit(admin);
    const retry = await admin.request('POST', '/admin/v1/plans', { json: { name: 'silver', limits: [MINUTE] }, headers });
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.headers.get('location')).toBe('/admin/v1/plans/silver');
    expect(retry.body).toEqual(first.body);
    expect((await newestAudit(admin))[0]).toEqual(audited);
    const other = await admin.request('POST', '/admin/v1/plans', { json: { name: 'bronze', limits: [MINUTE] }, headers });
    expectError(other, 422, 'idempotency_key_mismatch');
  });

  test('400 naming the field for each bad input; nothing created', async ({ t, admin }) => {
    const windows = (n: number) => Array.from({ length: n }, (_, i) => ({ name: `w${i}`, limit: 5, windowSeconds: 60 * (i + 1) }));
    for (const [json, field] of [
      [{ name: 'p', limits: [{ ...MINUTE, windowSeconds: 0 }] }, 'body/limits/0/windowSeconds'],
      [{ name: 'p', limits: [MINUTE, { ...MINUTE, name: 'month', windowSeconds: 2_678_401 }] }, 'body/limits/1/windowSeconds'],
      [{ name: 'p', limits: windows(6) }, 'body/limits'],
      [{ name: 'p', limits: [] }, 'body/limits'],
      [{ name: 'p', limits: [MINUTE, SECOND, { ...MINUTE, windowSeconds: 120 }] }, 'body/limits/2/name'],
      [{ name: 'p', limits: [{ ...MINUTE, limit: 0 }] }, 'body/limits/0/limit'],
      [{ name: 'p', limits: [{ ...MINUTE, algorithm: 'leaky' }] }, 'body/limits/0/algorithm'],
      [{ name: 'p', limits: [{ ...MINUTE, name: 'Minute' }] }, 'body/limits/0/name'],
      [{ name: 'Gold', limits: [MINUTE] }, 'body/name'],
      [{ name: 'x'.repeat(33), limits: [MINUTE] }, 'body/name'],
      [{ name: 'p', limits: [MINUTE], concurrency: 0 }, 'body/concurrency'],
      [{ name: 'p' }, 'body/limits'],
      [{ name: 'p', limits: [MINUTE], extra: 1 }, 'body/extra'],
    ] as const) {
      const response = await admin.request('POST', '/admin/v1/plans', { json });
      expectError(response, 400, 'bad_request');
      expect(response.body.message, JSON.stringify(json)).toMatch(new RegExp(`^${field}( |$)`));
    }
    expect(await t.db.query("SELECT name FROM plans WHERE name IN ('p', 'Gold')")).toEqual([]);
    // As docs/admin-api.md quotes them.
    const message = async (json: unknown) => (await admin.request('POST', '/admin/v1/plans', { json })).body.message as string;
    expect(await message({ name: 'p', limits: [{ ...MINUTE, windowSeconds: 0 }] })).toBe(
      'body/limits/0/windowSeconds must be an integer from 1 to 2678400',
    );
    expect(await message({ name: 'p', limits: [{ ...MINUTE, algorithm: 'leaky' }] })).toBe(
      'body/limits/0/algorithm must be fixed or sliding',
    );
    // 31 days is the bound, and a repeated name is refused with an Idempotency-Key too, before it is claimed.
    await createPlan(admin, { name: 'monthly', limits: [{ ...MINUTE, windowSeconds: 2_678_400 }] });
    const repeated = await admin.request('POST', '/admin/v1/plans', {
      json: { name: 'p', limits: [MINUTE, MINUTE] },
      headers: { 'idempotency-key': 'repeated' },
    });
    expect(repeated.body.message).toBe('body/limits/1/name repeats the window name minute: each window of a list has a name of its own');
  });
});

describe('change', () => {
  test('limits, concurrency and shadow; absent fields kept; audited before and after', async ({ admin }) => {
    const before = await createPlan(admin, { name: 'plat', limits: [MINUTE], concurrency: 4 });
    const changed = await admin.request('PATCH', '/admin/v1/plans/plat', { json: { limits: [SECOND], shadow: true } });
    expect(changed.status, JSON.stringify(changed.body)).toBe(200);
    expect(changed.body).toMatchObject({ name: 'plat', limits: [SECOND], concurrency: 4, shadow: true, createdAt: before.createdAt });
    const [entry] = await newestAudit(admin);
    expect(entry).toMatchObject({
      action: 'plan.update',
      details: {
        plan: 'plat',
        before: { limits: [{ ...MINUTE, algorithm: 'fixed' }], concurrency: 4, shadow: false },
        after: { limits: [SECOND], concurrency: 4, shadow: true },
      },
    });
    const none = await admin.request('PATCH', '/admin/v1/plans/plat', { json: { concurrency: null } });
    expect(none.body).toMatchObject({ concurrency: null, shadow: true });
    // The same again changes and records nothing.
    const [audited] = await newestAudit(admin);
    expect((await admin.request('PATCH', '/admin/v1/plans/plat', { json: { concurrency: null } })).status).toBe(200);
    expect((await newestAudit(admin))[0]).toEqual(audited);
  });

  test('limits null: 409 conflict naming the working keys that carry none of their own; 200 once none works', async ({ t, admin }) => {
    await createPlan(admin, { name: 'tin', limits: [MINUTE] });
    const id = await keyOfPlan({ t, admin }, 'tin');
    await keyOfPlan({ t, admin }, 'tin');
    const refused = await admin.request('PATCH', '/admin/v1/plans/tin', { json: { limits: null } });
    expectError(refused, 409, 'conflict');
    expect(refused.body.message).toMatch(/^plan tin has working keys: 2; /);
    await t.db.query('UPDATE api_keys SET revoked_at = now() WHERE id = $1', [id]);
    expectError(await admin.request('PATCH', '/admin/v1/plans/tin', { json: { limits: null } }), 409, 'conflict');
    await t.db.query("UPDATE api_keys SET revoked_at = now() WHERE plan = 'tin'", []);
    const changed = await admin.request('PATCH', '/admin/v1/plans/tin', { json: { limits: null } });
    expect(changed.status, JSON.stringify(changed.body)).toBe(200);
    expect(changed.body.limits).toBeNull();
  });

  test('404 for a plan that does not exist; 400 for an empty change or a bad window', async ({ admin }) => {
    expectError(await admin.request('PATCH', '/admin/v1/plans/nosuch', { json: { shadow: true } }), 404, 'not_found');
    expectError(await admin.request('PATCH', '/admin/v1/plans/free', { json: {} }), 400, 'bad_request');
    const repeated = await admin.request('PATCH', '/admin/v1/plans/free', { json: { limits: [SECOND, SECOND] } });
    expectError(repeated, 400, 'bad_request');
    expect(repeated.body.message).toMatch(/^body\/limits\/1\/name /);
    const zero = await admin.request('PATCH', '/admin/v1/plans/free', { json: { limits: [{ ...SECOND, windowSeconds: 0 }] } });
    expect(zero.body.message).toMatch(/^body\/limits\/0\/windowSeconds /);
  });

  test('403 for a read token', async ({ admin }) => {
    const headers = { authorization: `Bearer ${admin.read.token}` };
    expectError(await admin.request('PATCH', '/admin/v1/plans/free', { json: { shadow: true }, headers }), 403, 'forbidden');
  });
});

describe('delete', () => {
  test('409 conflict while a working key has the plan, naming how many; 204 once revoked; audited; then 404', async ({ t, admin }) => {
    await createPlan(admin, { name: 'lead', limits: [MINUTE] });
    const id = await keyOfPlan({ t, admin }, 'lead');
    const refused = await admin.request('DELETE', '/admin/v1/plans/lead');
    expectError(refused, 409, 'conflict');
    expect(refused.body.message).toBe('plan lead has working keys: 1; revoke them or move them to another plan first');
    // Revoked as the key rules revoke (their responses show the code's plans only, until the keys take any plan).
    await t.db.query('UPDATE api_keys SET revoked_at = now() WHERE id = $1', [id]);
    const deleted = await admin.request('DELETE', '/admin/v1/plans/lead');
    expect(deleted.status, JSON.stringify(deleted.body)).toBe(204);
    const [entry] = await newestAudit(admin);
    expect(entry).toMatchObject({
      action: 'plan.delete',
      details: { plan: 'lead', before: { limits: [{ ...MINUTE, algorithm: 'fixed' }], concurrency: null, shadow: false } },
    });
    expectError(await admin.request('GET', '/admin/v1/plans/lead'), 404, 'not_found');
    expectError(await admin.request('DELETE', '/admin/v1/plans/lead'), 404, 'not_found');
  });

  test('a delete waits for a key rule that locked the plan (lockPlan), then sees its key: never both', async ({ t, admin }) => {
    await createPlan(admin, { name: 'zinc', limits: [MINUTE] });
    const { id } = await createKey(admin, { plan: 'free' });
    let deleting: Promise<{ status: number }> | undefined;
    await t.db.transaction(async (tx) => {
      expect(await lockPlan(tx, 'zinc')).toMatchObject({ name: 'zinc', limits: [{ ...MINUTE, algorithm: 'fixed' }] });
      deleting = admin.request('DELETE', '/admin/v1/plans/zinc');
      // The key is moved onto the plan while the delete waits for the lock (on PGlite, for the one connection).
      await tx.query('UPDATE api_keys SET plan = $2 WHERE id = $1', [id, 'zinc']);
    });
    expect((await deleting!).status).toBe(409);
    // A delete first: the key rules' lock finds no plan.
    await t.db.query('UPDATE api_keys SET revoked_at = now() WHERE id = $1', [id]);
    expect((await admin.request('DELETE', '/admin/v1/plans/zinc')).status).toBe(204);
    expect(await t.db.transaction((tx) => lockPlan(tx, 'zinc'))).toBeUndefined();
  });

  test('405 for a method the paths do not have', async ({ admin }) => {
    expect((await admin.request('PUT', '/admin/v1/plans/free', { json: {} })).status).toBe(405);
    expect((await admin.request('DELETE', '/admin/v1/plans')).status).toBe(405);
  });
});
