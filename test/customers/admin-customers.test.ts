import { describe, expect } from 'vitest';
import { createAdminTokensRepository } from '../../src/admin/tokens-repository.js';
import { runKeysCommand } from '../../src/cli/keys/commands.js';
import { adminTest, createKey, expectError, type TestAdmin } from '../support/admin.js';
import { bearer, waitForKeyOnApp } from '../support/keys.js';

const test = adminTest();

/** Creates a customer through the API with the write token. */
async function createCustomer(admin: TestAdmin, body: Record<string, unknown>) {
  const response = await admin.request('POST', '/admin/v1/customers', { json: body });
  expect(response.status, JSON.stringify(response.body)).toBe(201);
  return response.body as { id: number; externalId: string; name: string; limits: unknown; createdAt: string; updatedAt: string };
}

/** The audit trail's newest entries, newest first. */
const newestAudit = async (admin: TestAdmin, limit = 1) => (await admin.request('GET', `/admin/v1/audit?limit=${limit}`)).body;

describe('create', () => {
  test('201 with a Location and the customer, which a get reads back; audited with the admin token', async ({ admin }) => {
    const response = await admin.request('POST', '/admin/v1/customers', { json: { externalId: 'cus_4711', name: 'Acme Corp' } });
    expect(response.status, JSON.stringify(response.body)).toBe(201);
    const created = response.body;
    expect(created).toEqual({
      id: expect.any(Number),
      externalId: 'cus_4711',
      name: 'Acme Corp',
      limits: null,
      credits: null,
      createdAt: expect.any(String),
      updatedAt: created.createdAt,
    });
    expect(response.headers.get('location')).toBe(`/admin/v1/customers/${created.id}`);
    expect((await admin.request('GET', `/admin/v1/customers/${created.id}`)).body).toEqual(created);
    const [entry] = await newestAudit(admin);
    expect(entry).toMatchObject({
      actor: 'admin-api',
      adminTokenId: admin.write.id,
      action: 'customer.create',
      keyId: null,
      details: { customerId: created.id, externalId: 'cus_4711', name: 'Acme Corp' },
    });
  });

  test("the name is '' when left out", async ({ admin }) => {
    expect(await createCustomer(admin, { externalId: 'cus_nameless' })).toMatchObject({ name: '' });
  });

  test('409 conflict for an externalId another customer has; nothing is created or audited', async ({ admin }) => {
    await createCustomer(admin, { externalId: 'cus_taken' });
    const [audited] = await newestAudit(admin);
    const refused = await admin.request('POST', '/admin/v1/customers', { json: { externalId: 'cus_taken', name: 'second' } });
    expectError(refused, 409, 'conflict');
    expect(refused.body.message).toBe('externalId cus_taken is taken by another customer');
    expect((await admin.request('GET', '/admin/v1/customers?externalId=cus_taken')).body).toHaveLength(1);
    expect((await newestAudit(admin))[0]).toEqual(audited);
  });

  test('10 concurrent creates of one externalId: one 201, the others 409, never a 500', async ({ admin }) => {
    const responses = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        admin.request('POST', '/admin/v1/customers', { json: { externalId: 'cus_raced', name: `try ${i}` } }),
      ),
    );
    expect(responses.map((response) => response.status).sort()).toEqual([201, ...Array<number>(9).fill(409)]);
    expect((await admin.request('GET', '/admin/v1/customers?externalId=cus_raced')).body).toHaveLength(1);
  });

  test('400 naming the field for an empty, too long or invisible externalId, a bad name, an unknown field; nothing is created', async ({
    t,
    admin,
  }) => {
    const count = async () => (await t.db.query<{ count: number }>('SELECT count(*)::int AS count FROM customers'))[0]!.count;
    const before = await count();
    for (const [json, field] of [
      [{}, 'body/externalId'],
      [{ externalId: '' }, 'body/externalId'],
      [{ externalId: 'x'.repeat(201) }, 'body/externalId'],
      [{ externalId: '\u200b' }, 'body/externalId'],
      [{ externalId: 'tab\there' }, 'body/externalId'],
      [{ externalId: 7 }, 'body/externalId'],
      [{ externalId: 'cus_1', name: 'esc\u001b[31m' }, 'body/name'],
      [{ externalId: 'cus_1', name: 'n'.repeat(201) }, 'body/name'],
      [{ externalId: 'cus_1', limits: { perMinute: 10 } }, 'body'],
    ] as const) {
      const response = await admin.request('POST', '/admin/v1/customers', { json });
      expectError(response, 400, 'bad_request');
      expect(response.body.message, JSON.stringify(json)).toMatch(new RegExp(`^${field}\\b`));
    }
    expect(await count()).toBe(before);
    // 200 characters, counted as code points, is the bound.
    expect((await createCustomer(admin, { externalId: '🔑'.repeat(200) })).externalId).toBe('🔑'.repeat(200));
  });

  test('400 naming body/externalId for a look-alike of an id, on create and on change; the listing filter finds none', async ({
    admin,
  }) => {
    const original = await createCustomer(admin, { externalId: 'café-4712' });
    const other = await createCustomer(admin, { externalId: 'cus_4713' });
    const lookAlikes = {
      'zero-width space': 'café-4712\u200b',
      'zero-width joiner': 'caf\u200dé-4712',
      'soft hyphen': 'café\u00ad-4712',
      'word joiner': 'café-\u20604712',
      'trailing space': 'café-4712 ',
      'leading space': ' café-4712',
      'two spaces': 'café  4712',
      'no-break space': 'café\u00a04712',
      'left-to-right mark': '\u200ecafé-4712',
      'NFD form': 'cafe\u0301-4712',
    };
    for (const [kind, externalId] of Object.entries(lookAlikes)) {
      const created = await admin.request('POST', '/admin/v1/customers', { json: { externalId } });
      expectError(created, 400, 'bad_request');
      expect(created.body.message, kind).toMatch(/^body\/externalId must be 1 to 200 characters/);
      const changed = await admin.request('PATCH', `/admin/v1/customers/${other.id}`, { json: { externalId } });
      expectError(changed, 400, 'bad_request');
      expect(changed.body.message, kind).toMatch(/^body\/externalId /);
      // The filter takes what any stored id may be, and no customer has a look-alike.
      const found = await admin.request('GET', `/admin/v1/customers?externalId=${encodeURIComponent(externalId)}`);
      expect(found.body, kind).toEqual([]);
    }
    expect((await admin.request('GET', `/admin/v1/customers/${other.id}`)).body).toEqual(other);
    expect((await admin.request('GET', `/admin/v1/customers?externalId=${encodeURIComponent('café-4712')}`)).body).toEqual([original]);
    // Words apart by single spaces, any script, and characters outside the BMP are ids.
    for (const externalId of ['Acme Corp 12', 'עמית-12', 'مشترك ١٢', '🔑 key 7']) {
      expect((await createCustomer(admin, { externalId })).externalId).toBe(externalId);
    }
  });

  test('a retry with the Idempotency-Key gets the same customer and creates no second one', async ({ admin }) => {
    const headers = { 'idempotency-key': 'crm-sync-9' };
    const first = await admin.request('POST', '/admin/v1/customers', { json: { externalId: 'cus_retried' }, headers });
    expect(first.status).toBe(201);
    const retry = await admin.request('POST', '/admin/v1/customers', { json: { externalId: 'cus_retried' }, headers });
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.headers.get('location')).toBe(first.headers.get('location'));
    expect(retry.body).toEqual(first.body);
    expectError(
      await admin.request('POST', '/admin/v1/customers', { json: { externalId: 'cus_other' }, headers }),
      422,
      'idempotency_key_mismatch',
    );
  });

  test('403 for a read token; 401 without a token', async ({ admin }) => {
    const refused = await admin.request('POST', '/admin/v1/customers', {
      json: { externalId: 'cus_read' },
      headers: bearer(admin.read.token),
    });
    expectError(refused, 403, 'forbidden');
    expectError(await admin.request('GET', '/admin/v1/customers', { headers: { authorization: '' } }), 401, 'unauthorized');
    expect((await admin.request('GET', '/admin/v1/customers?externalId=cus_read')).body).toEqual([]);
  });
});

describe('list and get', () => {
  test('pages through every customer with Link rel="next"; the externalId filter finds one', async ({ admin }) => {
    const made: Array<{ id: number }> = [];
    for (let i = 0; i < 5; i++) made.push(await createCustomer(admin, { externalId: `cus_paged_${i}` }));
    const seen: Array<{ id: number }> = [];
    let path: string | undefined = '/admin/v1/customers?limit=2';
    let pages = 0;
    while (path) {
      const response = await admin.request('GET', path, { headers: bearer(admin.read.token) });
      expect(response.status, JSON.stringify(response.body)).toBe(200);
      expect(response.body.length).toBeLessThanOrEqual(2);
      seen.push(...response.body);
      pages++;
      path = response.headers.get('link')?.match(/^<([^>]+)>; rel="next"$/)?.[1];
    }
    const ids = seen.map((customer) => customer.id);
    expect(ids).toEqual([...new Set(ids)].sort((a, b) => a - b));
    expect(pages).toBe(Math.ceil(ids.length / 2));
    expect(ids.filter((id) => made.some((customer) => customer.id === id))).toEqual(made.map((customer) => customer.id));

    const found = await admin.request('GET', '/admin/v1/customers?externalId=cus_paged_3');
    expect(found.body).toEqual([made[3]]);
    expect(found.headers.get('link')).toBeNull();
    expect((await admin.request('GET', '/admin/v1/customers?externalId=cus_none')).body).toEqual([]);
  });

  test('400 for a bad limit, filter or cursor, and for a cursor made for another filter', async ({ admin }) => {
    for (const query of ['limit=0', 'limit=101', 'cursor=garbage!', 'externalId=', 'colour=red']) {
      const response = await admin.request('GET', `/admin/v1/customers?${query}`);
      if (query === 'colour=red') expect(response.status).toBe(200);
      else expectError(response, 400, 'bad_request');
    }
    await createCustomer(admin, { externalId: 'cus_cursor_a' });
    await createCustomer(admin, { externalId: 'cus_cursor_b' });
    const first = await admin.request('GET', '/admin/v1/customers?limit=1');
    const cursor = first.headers.get('link')!.match(/cursor=([^&>]+)/)![1];
    expect((await admin.request('GET', `/admin/v1/customers?limit=1&cursor=${cursor}`)).status).toBe(200);
    expectError(await admin.request('GET', `/admin/v1/customers?limit=1&externalId=cus_cursor_b&cursor=${cursor}`), 400, 'bad_request');
  });

  test('get: 200, 404 for no such customer, 400 for no id, 405 for another method', async ({ admin }) => {
    const { id } = await createCustomer(admin, { externalId: 'cus_get' });
    expect((await admin.request('GET', `/admin/v1/customers/${id}`, { headers: bearer(admin.read.token) })).body.id).toBe(id);
    expectError(await admin.request('GET', '/admin/v1/customers/999999999'), 404, 'not_found');
    expectError(await admin.request('GET', '/admin/v1/customers/abc'), 400, 'bad_request');
    expectError(await admin.request('DELETE', `/admin/v1/customers/${id}`), 405, 'method_not_allowed');
  });
});

describe('change', () => {
  test('PATCH changes the name and the externalId, moves updatedAt, and records the values before and after', async ({ admin }) => {
    const created = await createCustomer(admin, { externalId: 'cus_old', name: 'Old name' });
    const changed = await admin.request('PATCH', `/admin/v1/customers/${created.id}`, {
      json: { externalId: 'cus_new', name: 'New name' },
    });
    expect(changed.status, JSON.stringify(changed.body)).toBe(200);
    expect(changed.body).toMatchObject({ id: created.id, externalId: 'cus_new', name: 'New name', createdAt: created.createdAt });
    expect(Date.parse(changed.body.updatedAt)).toBeGreaterThanOrEqual(Date.parse(created.updatedAt));
    expect((await admin.request('GET', `/admin/v1/customers/${created.id}`)).body).toEqual(changed.body);
    expect((await newestAudit(admin))[0]).toMatchObject({
      actor: 'admin-api',
      adminTokenId: admin.write.id,
      action: 'customer.update',
      keyId: null,
      details: {
        customerId: created.id,
        before: { externalId: 'cus_old', name: 'Old name' },
        after: { externalId: 'cus_new', name: 'New name' },
      },
    });
    // Only the name: the externalId is kept.
    expect((await admin.request('PATCH', `/admin/v1/customers/${created.id}`, { json: { name: '' } })).body).toMatchObject({
      externalId: 'cus_new',
      name: '',
    });
  });

  test('a change to what it is changes and records nothing', async ({ admin }) => {
    const created = await createCustomer(admin, { externalId: 'cus_same', name: 'Same' });
    const [audited] = await newestAudit(admin);
    const unchanged = await admin.request('PATCH', `/admin/v1/customers/${created.id}`, { json: { name: 'Same' } });
    expect(unchanged.body).toEqual(created);
    expect((await newestAudit(admin))[0]).toEqual(audited);
  });

  test('409 for an externalId another customer has, 404 for no such customer, 403 for a read token; nothing changes', async ({ admin }) => {
    await createCustomer(admin, { externalId: 'cus_first' });
    const second = await createCustomer(admin, { externalId: 'cus_second' });
    const [audited] = await newestAudit(admin);
    const taken = await admin.request('PATCH', `/admin/v1/customers/${second.id}`, { json: { externalId: 'cus_first' } });
    expectError(taken, 409, 'conflict');
    expectError(await admin.request('PATCH', '/admin/v1/customers/999999999', { json: { name: 'x' } }), 404, 'not_found');
    expectError(
      await admin.request('PATCH', `/admin/v1/customers/${second.id}`, { json: { name: 'x' }, headers: bearer(admin.read.token) }),
      403,
      'forbidden',
    );
    expect((await admin.request('GET', `/admin/v1/customers/${second.id}`)).body).toEqual(second);
    expect((await newestAudit(admin))[0]).toEqual(audited);
  });

  test('400 naming the field for a bad externalId or name, an unknown field or no field', async ({ admin }) => {
    const created = await createCustomer(admin, { externalId: 'cus_checked' });
    for (const [json, field] of [
      [{}, 'body'],
      [{ externalId: '' }, 'body/externalId'],
      [{ externalId: 'x'.repeat(201) }, 'body/externalId'],
      [{ name: 'a\u202eb' }, 'body/name'],
      [{ limits: { perMinute: 10 } }, 'body'],
    ] as const) {
      const response = await admin.request('PATCH', `/admin/v1/customers/${created.id}`, { json });
      expectError(response, 400, 'bad_request');
      expect(response.body.message, JSON.stringify(json)).toMatch(new RegExp(`^${field}\\b`));
    }
    expect((await admin.request('GET', `/admin/v1/customers/${created.id}`)).body).toEqual(created);
  });
});

describe('keys of a customer', () => {
  test('a key made with customerId shows it, keeps it through rotation, and is listed by the customerId filter', async ({ t, admin }) => {
    const customer = await createCustomer(admin, { externalId: 'cus_keys' });
    const key = await createKey(admin, { plan: 'pro', name: 'production', customerId: customer.id });
    expect(key).toMatchObject({ customerId: customer.id, plan: 'pro' });
    expect((await admin.request('GET', `/admin/v1/keys/${key.id}`)).body.customerId).toBe(customer.id);
    expect((await newestAudit(admin))[0]).toMatchObject({ action: 'key.create', keyId: key.id, details: { customerId: customer.id } });
    // The key works on /v1 as any other.
    await waitForKeyOnApp(t.app, bearer(key.key));
    expect((await t.app.inject({ url: '/v1/pets', headers: bearer(key.key) })).statusCode).toBe(200);

    const rotated = await admin.request('POST', `/admin/v1/keys/${key.id}/rotate`, { json: { overlapSeconds: 0 } });
    expect(rotated.status, JSON.stringify(rotated.body)).toBe(201);
    expect(rotated.body.customerId).toBe(customer.id);

    const alone = await createKey(admin, { plan: 'pro', name: 'production' });
    expect(alone.customerId).toBeNull();
    const listed = await admin.request('GET', `/admin/v1/keys?customerId=${customer.id}&limit=1`);
    expect(listed.body.map((one: { id: number }) => one.id)).toEqual([key.id]);
    const next = listed.headers.get('link')!.match(/^<([^>]+)>; rel="next"$/)![1]!;
    expect(next).toContain(`customerId=${customer.id}`);
    expect((await admin.request('GET', next)).body.map((one: { id: number }) => one.id)).toEqual([rotated.body.id]);
    // A cursor holds only with the filters it was made for.
    expectError(await admin.request('GET', next.replace(`customerId=${customer.id}`, 'name=production')), 400, 'bad_request');
  });

  test('400 naming body/customerId for a customer that does not exist, or no id; nothing is created', async ({ t, admin }) => {
    const before = (await t.app.apiKeysRepository.list()).length;
    for (const customerId of [999_999_999, 0, 'abc']) {
      const response = await admin.request('POST', '/admin/v1/keys', { json: { plan: 'free', customerId } });
      expectError(response, 400, 'bad_request');
      expect(response.body.message, String(customerId)).toMatch(/^body\/customerId /);
    }
    expect((await admin.request('POST', '/admin/v1/keys', { json: { plan: 'free', customerId: 999_999_999 } })).body.message).toBe(
      'body/customerId is 999999999, which names no customer',
    );
    // With an Idempotency-Key too: the refusal is not stored as the key's answer.
    const headers = { 'idempotency-key': 'unknown-customer' };
    expectError(
      await admin.request('POST', '/admin/v1/keys', { json: { plan: 'free', customerId: 999_999_999 }, headers }),
      400,
      'bad_request',
    );
    expect((await t.app.apiKeysRepository.list()).length).toBe(before);
  });

  test('the keys command: create --customer ID makes a key of that customer; an unknown one is a bad argument, nothing written', async ({
    t,
    admin,
  }) => {
    const customer = await createCustomer(admin, { externalId: 'cus_command' });
    const repositories = { keys: t.app.apiKeysRepository, rules: t.app.keyRules, tokens: createAdminTokensRepository(t.db) };
    const command = async (argv: string[]) => {
      const lines = { out: [] as string[], err: [] as string[] };
      const code = await runKeysCommand(argv, repositories, { out: (line) => lines.out.push(line), err: (line) => lines.err.push(line) });
      return { code, ...lines };
    };

    const created = await command(['create', '--plan', 'free', '--customer', String(customer.id)]);
    expect(created.code, created.err.join('\n')).toBe(0);
    const id = Number(/^Created API key (\d+) /.exec(created.out[0]!)![1]);
    expect((await admin.request('GET', `/admin/v1/keys/${id}`)).body.customerId).toBe(customer.id);

    const before = (await t.app.apiKeysRepository.list()).length;
    for (const [argv, refusal] of [
      [['create', '--plan', 'free', '--customer', '999999999'], 'keys: --customer is 999999999, which names no customer. usage: '],
      [['create', '--plan', 'free', '--customer', 'acme'], 'keys: --customer must be an integer from 1 to '],
    ] as const) {
      const refused = await command([...argv]);
      expect(refused.code).toBe(2);
      expect(refused.err.join('\n')).toContain(refusal);
    }
    expect((await t.app.apiKeysRepository.list()).length).toBe(before);
  });
});

describe('limits', () => {
  test('create with limits shows them (concurrency null when absent); a PATCH changes them, null removes them; each change audited', async ({
    admin,
  }) => {
    const created = await createCustomer(admin, { externalId: 'cus_limited', limits: { perMinute: 100, perDay: 10_000 } });
    expect(created).toMatchObject({ limits: { perMinute: 100, perDay: 10_000, concurrency: null } });
    expect((await admin.request('GET', `/admin/v1/customers/${created.id}`)).body).toEqual(created);
    expect((await newestAudit(admin))[0]).toMatchObject({
      action: 'customer.create',
      details: { customerId: created.id, limits: { perMinute: 100, perDay: 10_000, concurrency: null } },
    });

    const limits = { perMinute: 50, perDay: 20_000, concurrency: 4 };
    const changed = await admin.request('PATCH', `/admin/v1/customers/${created.id}`, { json: { limits } });
    expect(changed.status, JSON.stringify(changed.body)).toBe(200);
    expect(changed.body).toMatchObject({ externalId: 'cus_limited', limits });
    expect((await newestAudit(admin))[0]).toMatchObject({
      action: 'customer.update',
      details: { before: { limits: created.limits }, after: { limits } },
    });
    // The same limits again: nothing changes or is recorded.
    const [audited] = await newestAudit(admin);
    expect((await admin.request('PATCH', `/admin/v1/customers/${created.id}`, { json: { limits } })).body).toEqual(changed.body);
    expect((await newestAudit(admin))[0]).toEqual(audited);

    const removed = await admin.request('PATCH', `/admin/v1/customers/${created.id}`, { json: { limits: null } });
    expect(removed.body).toMatchObject({ limits: null });
    expect((await newestAudit(admin))[0]).toMatchObject({ details: { before: { limits }, after: { limits: null } } });
    expect(await createCustomer(admin, { externalId: 'cus_unlimited', limits: null })).toMatchObject({ limits: null });
  });

  test('a PATCH that changes only the concurrency (set, changed, removed) is saved and audited like any change', async ({ admin }) => {
    const windows = { perMinute: 100, perDay: 10_000 };
    const created = await createCustomer(admin, { externalId: 'cus_concurrency', limits: windows });
    let before = created.limits;
    for (const concurrency of [4, 8, null]) {
      const limits = { ...windows, concurrency };
      const changed = await admin.request('PATCH', `/admin/v1/customers/${created.id}`, { json: { limits } });
      expect(changed.body, `concurrency ${concurrency}`).toMatchObject({ limits });
      expect((await admin.request('GET', `/admin/v1/customers/${created.id}`)).body).toMatchObject({ limits });
      expect((await newestAudit(admin))[0]).toMatchObject({
        action: 'customer.update',
        details: { customerId: created.id, before: { limits: before }, after: { limits } },
      });
      before = limits;
    }
  });

  test('400 naming body/limits for limits missing one window, out of bounds, with an unknown field; nothing is created', async ({
    admin,
  }) => {
    for (const limits of [
      { perMinute: 10 },
      { perDay: 10 },
      { perMinute: 0, perDay: 10 },
      { perMinute: 10, perDay: 2_147_483_648 },
      { perMinute: 10, perDay: 10, concurrency: 0 },
      { perMinute: 10, perDay: 10, concurrency: 100_001 },
      { perMinute: 10, perDay: 10, burst: 5 },
      'unlimited',
    ]) {
      const response = await admin.request('POST', '/admin/v1/customers', { json: { externalId: 'cus_bad_limits', limits } });
      expectError(response, 400, 'bad_request');
      expect(response.body.message, JSON.stringify(limits)).toMatch(/^body\/limits\b/);
    }
    expect((await admin.request('GET', '/admin/v1/customers?externalId=cus_bad_limits')).body).toEqual([]);
  });
});

/** An app whose createPet costs 5 units, for the limits that must fit it. */
const pricedTest = adminTest({ env: { RATE_LIMIT_COSTS: 'createPet=5' } });

describe('limits and RATE_LIMIT_COSTS', () => {
  pricedTest(
    '400 naming the limit below an operation’s cost: every key of the customer would be refused it for good',
    async ({ admin }) => {
      const refused = await admin.request('POST', '/admin/v1/customers', {
        json: { externalId: 'cus_cheap', limits: { perMinute: 4, perDay: 100 } },
      });
      expectError(refused, 400, 'bad_request');
      expect(refused.body.message).toMatch(/^body\/limits\/perMinute is 4, less than the 5 units createPet costs/);
      const created = await createCustomer(admin, { externalId: 'cus_cheap', limits: { perMinute: 5, perDay: 100 } });
      const patched = await admin.request('PATCH', `/admin/v1/customers/${created.id}`, { json: { limits: { perMinute: 5, perDay: 3 } } });
      expectError(patched, 400, 'bad_request');
      expect(patched.body.message).toMatch(/^body\/limits\/perDay is 3/);
    },
  );
});
