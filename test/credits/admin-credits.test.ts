import { describe, expect } from 'vitest';
import { adminTest, createKey, expectError, type TestAdmin } from '../support/admin.js';
import { bearer } from '../support/keys.js';
import { T0 } from '../support/time.js';

// The clock is T0, 2026-11-22T10:00Z: a daily refill is next due at 2026-11-23T00:00Z, a monthly one on the 1st of December.
const test = adminTest({ clock: T0 });

const NEXT_DAY = '2026-11-23T00:00:00.000Z';
const NEXT_MONTH = '2026-12-01T00:00:00.000Z';

let externalIds = 0;
/** Creates a customer through the API, with the body's other fields. */
async function createCustomer(admin: TestAdmin, body: Record<string, unknown> = {}) {
  const response = await admin.request('POST', '/admin/v1/customers', { json: { externalId: `cus_credits_${++externalIds}`, ...body } });
  expect(response.status, JSON.stringify(response.body)).toBe(201);
  return response.body as { id: number; credits: unknown };
}

const newestAudit = async (admin: TestAdmin) => (await admin.request('GET', '/admin/v1/audit?limit=1')).body[0];

/** Sends an operation on a customer's or a key's credits. */
const operate = (admin: TestAdmin, path: string, json: unknown, headers?: Record<string, string>) =>
  admin.request('POST', `${path}/credits`, { json, headers });

describe('credits on customers', () => {
  test('made with the customer, shown by get and list, changed by PATCH (a set, with the new refill), removed by null', async ({
    admin,
  }) => {
    const created = await createCustomer(admin, { credits: { remaining: 10_000, refill: { interval: 'month', amount: 10_000 } } });
    const monthly = { remaining: 10_000, refill: { interval: 'month', amount: 10_000, dayOfMonth: 1 }, refillAt: NEXT_MONTH };
    expect(created.credits).toEqual(monthly);
    expect(await newestAudit(admin)).toMatchObject({ action: 'customer.create', details: { customerId: created.id, credits: monthly } });
    expect((await admin.request('GET', `/admin/v1/customers/${created.id}`)).body.credits).toEqual(monthly);
    const listed = await admin.request('GET', `/admin/v1/customers?externalId=cus_credits_${externalIds}`);
    expect(listed.body[0].credits).toEqual(monthly);

    const changed = await admin.request('PATCH', `/admin/v1/customers/${created.id}`, {
      json: { credits: { remaining: 50, refill: { interval: 'day', amount: 100 } } },
    });
    expect(changed.status, JSON.stringify(changed.body)).toBe(200);
    const daily = { remaining: 50, refill: { interval: 'day', amount: 100 }, refillAt: NEXT_DAY };
    expect(changed.body.credits).toEqual(daily);
    expect(await newestAudit(admin)).toMatchObject({
      action: 'customer.update',
      details: { customerId: created.id, before: { credits: monthly }, after: { credits: daily } },
    });

    // Credits without a refill leave none.
    const plain = await admin.request('PATCH', `/admin/v1/customers/${created.id}`, { json: { credits: { remaining: 7 } } });
    expect(plain.body.credits).toEqual({ remaining: 7, refill: null, refillAt: null });

    const removed = await admin.request('PATCH', `/admin/v1/customers/${created.id}`, { json: { credits: null } });
    expect(removed.body.credits).toBeNull();
    expect(await newestAudit(admin)).toMatchObject({ details: { before: { credits: { remaining: 7 } }, after: { credits: null } } });
    expect((await admin.request('GET', `/admin/v1/customers/${created.id}`)).body.credits).toBeNull();
  });

  test('a customer made without credits has none; the other fields change without touching them', async ({ t, admin }) => {
    const created = await createCustomer(admin);
    expect(created.credits).toBeNull();
    await admin.request('PATCH', `/admin/v1/customers/${created.id}`, { json: { credits: { remaining: 5 } } });
    const [before] = await t.db.query<{ version: number }>('SELECT version FROM credit_balances WHERE customer_id = $1', [created.id]);
    const renamed = await admin.request('PATCH', `/admin/v1/customers/${created.id}`, { json: { name: 'renamed' } });
    expect(renamed.body).toMatchObject({ name: 'renamed', credits: { remaining: 5 } });
    const [after] = await t.db.query<{ version: number }>('SELECT version FROM credit_balances WHERE customer_id = $1', [created.id]);
    expect(after).toEqual(before);
  });
});

describe('credits on keys', () => {
  test('made with the key, changed and removed by PATCH; a rotation keeps them', async ({ admin }) => {
    const key = await createKey(admin, { plan: 'pro', credits: { remaining: 1_000, refill: { interval: 'day', amount: 1_000 } } });
    const daily = { remaining: 1_000, refill: { interval: 'day', amount: 1_000 }, refillAt: NEXT_DAY };
    expect(key.credits).toEqual(daily);
    expect(await newestAudit(admin)).toMatchObject({ action: 'key.create', keyId: key.id, details: { credits: daily } });

    const rotated = await admin.request('POST', `/admin/v1/keys/${key.id}/rotate`, { json: { overlapSeconds: 60 } });
    expect(rotated.status).toBe(201);
    expect(rotated.body.credits).toEqual(daily);
    // An operation through the new key moves the one balance both keys show.
    expect((await operate(admin, `/admin/v1/keys/${rotated.body.id}`, { operation: 'increment', amount: 5 })).body.remaining).toBe(1_005);
    expect((await admin.request('GET', `/admin/v1/keys/${key.id}`)).body.credits.remaining).toBe(1_005);

    const changed = await admin.request('PATCH', `/admin/v1/keys/${rotated.body.id}`, {
      json: { credits: { remaining: 3, refill: { interval: 'month', amount: 9, dayOfMonth: 31 } } },
    });
    expect(changed.status, JSON.stringify(changed.body)).toBe(200);
    expect(changed.body.credits).toEqual({
      remaining: 3,
      refill: { interval: 'month', amount: 9, dayOfMonth: 31 },
      refillAt: '2026-11-30T00:00:00.000Z',
    });
    expect(await newestAudit(admin)).toMatchObject({
      action: 'key.update',
      keyId: rotated.body.id,
      details: { before: { credits: { remaining: 1_005 } }, after: { credits: { remaining: 3 } } },
    });
    const removed = await admin.request('PATCH', `/admin/v1/keys/${rotated.body.id}`, { json: { credits: null } });
    expect(removed.body.credits).toBeNull();
    const listed = await admin.request('GET', `/admin/v1/keys?limit=100`);
    expect(listed.body.find((one: { id: number }) => one.id === key.id).credits).toBeNull();
  });

  test('a key without credits shows null', async ({ admin }) => {
    const key = await createKey(admin, { plan: 'free' });
    expect(key.credits).toBeNull();
    expect((await admin.request('GET', `/admin/v1/keys/${key.id}`)).body.credits).toBeNull();
  });
});

describe('the operations', () => {
  test('set, increment and decrement, each answering the credits and audited with the values before and after', async ({ t, admin }) => {
    const customer = await createCustomer(admin, { credits: { remaining: 100, refill: { interval: 'day', amount: 100 } } });
    const path = `/admin/v1/customers/${customer.id}`;
    const daily = { refill: { interval: 'day', amount: 100 }, refillAt: NEXT_DAY };

    const incremented = await operate(admin, path, { operation: 'increment', amount: 50 });
    expect(incremented.status, JSON.stringify(incremented.body)).toBe(200);
    expect(incremented.body).toEqual({ remaining: 150, ...daily });
    expect(await newestAudit(admin)).toMatchObject({
      actor: 'admin-api',
      adminTokenId: admin.write.id,
      action: 'customer.credits',
      keyId: null,
      details: { customerId: customer.id, operation: 'increment', amount: 50, before: { remaining: 100 }, after: { remaining: 150 } },
    });

    // What was spent stays spent: a decrement floors remaining at 0 and, as a set, starts a new version from what remains.
    await t.db.query('UPDATE credit_balances SET spent = 120 WHERE customer_id = $1', [customer.id]);
    expect((await operate(admin, path, { operation: 'decrement', amount: 20 })).body).toEqual({ remaining: 10, ...daily });
    expect((await operate(admin, path, { operation: 'decrement', amount: 1_000 })).body).toEqual({ remaining: 0, ...daily });
    expect(await newestAudit(admin)).toMatchObject({
      details: { operation: 'decrement', amount: 1_000, before: { remaining: 10 }, after: { remaining: 0 } },
    });
    const [recorded] = await t.db.query('SELECT base, spent, version FROM credit_balances WHERE customer_id = $1', [customer.id]);
    expect(recorded).toEqual({ base: 0, spent: 0, version: 3 });

    expect((await operate(admin, path, { operation: 'set', amount: 40 })).body).toEqual({ remaining: 40, ...daily });
    const [row] = await t.db.query('SELECT base, spent, version, exhausted_version FROM credit_balances WHERE customer_id = $1', [
      customer.id,
    ]);
    expect(row).toEqual({ base: 40, spent: 0, version: 4, exhausted_version: null });
    expect((await operate(admin, path, { operation: 'set', amount: 0 })).body.remaining).toBe(0);
  });

  test('set and increment make a balance without a refill where there is none; a decrement of none is a 409', async ({ admin }) => {
    const key = await createKey(admin, { plan: 'pro' });
    const path = `/admin/v1/keys/${key.id}`;
    const refused = await operate(admin, path, { operation: 'decrement', amount: 1 });
    expectError(refused, 409, 'conflict');
    expect(refused.body.message).toBe(`API key ${key.id} has no credits to decrement; set or increment them first`);
    expect((await operate(admin, path, { operation: 'increment', amount: 25 })).body).toEqual({
      remaining: 25,
      refill: null,
      refillAt: null,
    });
    expect(await newestAudit(admin)).toMatchObject({
      action: 'key.credits',
      keyId: key.id,
      details: { quotaId: key.id, operation: 'increment', before: null, after: { remaining: 25 } },
    });

    const customer = await createCustomer(admin);
    expect((await operate(admin, `/admin/v1/customers/${customer.id}`, { operation: 'set', amount: 9 })).body).toEqual({
      remaining: 9,
      refill: null,
      refillAt: null,
    });
  });

  test('50 increments at once add up exactly', async ({ admin }) => {
    const customer = await createCustomer(admin, { credits: { remaining: 0 } });
    const path = `/admin/v1/customers/${customer.id}`;
    const answers = await Promise.all(
      Array.from({ length: 50 }, (_, i) => operate(admin, path, { operation: 'increment', amount: i + 1 })),
    );
    expect(answers.map((answer) => answer.status)).toEqual(Array<number>(50).fill(200));
    expect((await admin.request('GET', path)).body.credits.remaining).toBe((50 * 51) / 2);
    // Each saw a balance no other saw: the audit's before and after chain without a gap.
    const entries = (await admin.request('GET', '/admin/v1/audit?limit=50')).body as Array<{ details: { before: { remaining: number } } }>;
    expect(new Set(entries.map((entry) => entry.details.before.remaining)).size).toBe(50);
  });

  test('a retry with the Idempotency-Key increments once', async ({ admin }) => {
    const customer = await createCustomer(admin, { credits: { remaining: 10 } });
    const path = `/admin/v1/customers/${customer.id}`;
    const headers = { 'idempotency-key': 'top-up-42' };
    const first = await operate(admin, path, { operation: 'increment', amount: 5 }, headers);
    const retry = await operate(admin, path, { operation: 'increment', amount: 5 }, headers);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.body).toEqual(first.body);
    expect((await admin.request('GET', path)).body.credits.remaining).toBe(15);
  });

  test('404 for no such customer or key, 403 for a read token, 405 for another method', async ({ admin }) => {
    expectError(await operate(admin, '/admin/v1/customers/999999999', { operation: 'set', amount: 1 }), 404, 'not_found');
    expectError(await operate(admin, '/admin/v1/keys/999999999', { operation: 'set', amount: 1 }), 404, 'not_found');
    const customer = await createCustomer(admin);
    const path = `/admin/v1/customers/${customer.id}`;
    expectError(await operate(admin, path, { operation: 'set', amount: 1 }, bearer(admin.read.token)), 403, 'forbidden');
    expectError(await admin.request('GET', `${path}/credits`), 405, 'method_not_allowed');
    expect((await admin.request('GET', path)).body.credits).toBeNull();
  });

  test('400 naming the field for a negative, fractional or too large amount, an unknown operation, a 0 to move', async ({ admin }) => {
    const customer = await createCustomer(admin, { credits: { remaining: 10 } });
    const path = `/admin/v1/customers/${customer.id}`;
    for (const [json, field] of [
      [{ operation: 'increment', amount: -1 }, 'body/amount'],
      [{ operation: 'set', amount: -5 }, 'body/amount'],
      [{ operation: 'increment', amount: 1.5 }, 'body/amount'],
      [{ operation: 'set', amount: 1e12 + 1 }, 'body/amount'],
      [{ operation: 'increment', amount: 0 }, 'body/amount'],
      [{ operation: 'decrement', amount: 0 }, 'body/amount'],
      [{ operation: 'double', amount: 1 }, 'body/operation'],
      [{ amount: 1 }, 'body/operation'],
      [{ operation: 'set' }, 'body/amount'],
      [{ operation: 'set', amount: 1, extra: true }, 'body/extra'],
    ] as const) {
      const response = await operate(admin, path, json);
      expectError(response, 400, 'bad_request');
      expect(response.body.message, JSON.stringify(json)).toMatch(new RegExp(`^${field}( |$)`));
    }
    expect((await admin.request('GET', path)).body.credits.remaining).toBe(10);
  });
});

describe('bad credits on create and PATCH', () => {
  test('400 naming the field, on customers and keys alike; nothing is made or changed', async ({ admin }) => {
    const customer = await createCustomer(admin, { credits: { remaining: 10 } });
    const key = await createKey(admin, { plan: 'pro' });
    for (const [credits, field] of [
      [{ remaining: -1 }, 'body/credits/remaining'],
      [{ remaining: 0.5 }, 'body/credits/remaining'],
      [{}, 'body/credits/remaining'],
      [{ remaining: 1, refill: { interval: 'day' } }, 'body/credits/refill/amount'],
      [{ remaining: 1, refill: { interval: 'week', amount: 1 } }, 'body/credits/refill/interval'],
      [{ remaining: 1, refill: { interval: 'month', amount: 1, dayOfMonth: 0 } }, 'body/credits/refill/dayOfMonth'],
      [{ remaining: 1, refill: { interval: 'month', amount: 1, dayOfMonth: 32 } }, 'body/credits/refill/dayOfMonth'],
      [{ remaining: 1, refill: { interval: 'day', amount: 1, dayOfMonth: 5 } }, 'body/credits/refill/dayOfMonth'],
      [{ remaining: 1, refill: { interval: 'day', amount: -1 } }, 'body/credits/refill/amount'],
      [{ remaining: 1, spent: 0 }, 'body/credits/spent'],
    ] as const) {
      for (const [method, path, extra] of [
        ['POST', '/admin/v1/customers', { externalId: 'cus_refused' }],
        ['PATCH', `/admin/v1/customers/${customer.id}`, {}],
        ['POST', '/admin/v1/keys', { plan: 'pro' }],
        ['PATCH', `/admin/v1/keys/${key.id}`, {}],
      ] as const) {
        const response = await admin.request(method, path, { json: { ...extra, credits } });
        expectError(response, 400, 'bad_request');
        expect(response.body.message, `${method} ${path} ${JSON.stringify(credits)}`).toMatch(new RegExp(`^${field}( |$)`));
      }
    }
    expect((await admin.request('GET', '/admin/v1/customers?externalId=cus_refused')).body).toEqual([]);
    expect((await admin.request('GET', `/admin/v1/customers/${customer.id}`)).body.credits.remaining).toBe(10);
    expect((await admin.request('GET', `/admin/v1/keys/${key.id}`)).body.credits).toBeNull();
  });
});
