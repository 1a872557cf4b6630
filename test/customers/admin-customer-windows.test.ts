import { describe, expect } from 'vitest';
import { hashKey } from '../../src/api-keys/format.js';
import { adminTest, createKey, expectError, type TestAdmin } from '../support/admin.js';

// A create costs 5 units: a customer's windows must each hold that much.
const test = adminTest({ env: { RATE_LIMIT_COSTS: 'createPet=5' } });

const newestAudit = async (admin: TestAdmin) => (await admin.request('GET', '/admin/v1/audit?limit=1')).body[0];

const WINDOWS = [
  { name: 'day', limit: 50_000, windowSeconds: 86_400 },
  { name: 'burst', limit: 20, windowSeconds: 10, algorithm: 'sliding' },
];
/** As shown: shortest first, each algorithm filled in. */
const SHOWN = [
  { name: 'burst', limit: 20, windowSeconds: 10, algorithm: 'sliding' },
  { name: 'day', limit: 50_000, windowSeconds: 86_400, algorithm: 'fixed' },
];

describe('a customer’s windows', () => {
  test('a list of windows on create is shown with perMinute null, perDay and no concurrency; audited; a key of it reads them', async ({
    t,
    admin,
  }) => {
    const response = await admin.request('POST', '/admin/v1/customers', { json: { externalId: 'cus_windows', limits: WINDOWS } });
    expect(response.status, JSON.stringify(response.body)).toBe(201);
    const limits = { perMinute: null, perDay: 50_000, windows: SHOWN, concurrency: null };
    expect(response.body).toMatchObject({ limits });
    expect((await admin.request('GET', `/admin/v1/customers/${response.body.id}`)).body).toEqual(response.body);
    expect(await newestAudit(admin)).toMatchObject({ action: 'customer.create', details: { limits } });

    // What the limiter reads with the key: the customer's windows beside the key's own (null: its plan's).
    const key = await createKey(admin, { plan: 'pro', customerId: response.body.id });
    expect(await t.app.apiKeysRepository.findUsable(hashKey(key.key).toString('base64'))).toMatchObject({
      plan: 'pro',
      limits: null,
      customerLimits: { limits: SHOWN, concurrency: null },
    });
    const own = [{ name: 'second', limit: 5, windowSeconds: 1, algorithm: 'sliding' }];
    await admin.request('PATCH', `/admin/v1/keys/${key.id}`, { json: { limits: own } });
    expect((await t.app.apiKeysRepository.findUsable(hashKey(key.key).toString('base64')))!.limits).toEqual(own);
  });

  test('the object form: windows with a concurrency, perMinute replacing or adding the minute in them; each change audited', async ({
    admin,
  }) => {
    const created = await admin.request('POST', '/admin/v1/customers', {
      json: { externalId: 'cus_object', limits: { windows: WINDOWS, concurrency: 3 } },
    });
    expect(created.body.limits).toEqual({ perMinute: null, perDay: 50_000, windows: SHOWN, concurrency: 3 });
    const changed = await admin.request('PATCH', `/admin/v1/customers/${created.body.id}`, {
      json: { limits: { windows: WINDOWS, perMinute: 600, perDay: 40_000, concurrency: 3 } },
    });
    const windows = [SHOWN[0], { name: 'minute', limit: 600, windowSeconds: 60, algorithm: 'fixed' }, { ...SHOWN[1], limit: 40_000 }];
    expect(changed.body.limits).toEqual({ perMinute: 600, perDay: 40_000, windows, concurrency: 3 });
    expect(await newestAudit(admin)).toMatchObject({
      action: 'customer.update',
      details: { before: { limits: { windows: SHOWN } }, after: { limits: { perMinute: 600, windows } } },
    });
    // A concurrency needs windows: a list alone has none.
    const listed = await admin.request('PATCH', `/admin/v1/customers/${created.body.id}`, { json: { limits: WINDOWS } });
    expect(listed.body.limits).toEqual({ perMinute: null, perDay: 50_000, windows: SHOWN, concurrency: null });
  });

  test('bad windows are a 400 naming the field; nothing is created', async ({ admin }) => {
    const window = { name: 'minute', limit: 100, windowSeconds: 60 };
    for (const [limits, message] of [
      [[window, { ...window, windowSeconds: 3_600 }], 'body/limits/1/name repeats the window name minute'],
      [{ windows: [window, window] }, 'body/limits/windows/1/name repeats the window name minute'],
      [[{ ...window, windowSeconds: 0 }], 'body/limits/0/windowSeconds must be an integer from 1 to 2678400'],
      [{ windows: [{ ...window, algorithm: 'leaky' }] }, 'body/limits/windows/0/algorithm must be fixed or sliding'],
      [[{ ...window, limit: 4 }], 'body/limits/0/limit is 4, less than the 5 units createPet costs'],
      [{ windows: [window], perDay: 4 }, 'body/limits/perDay is 4, less than the 5 units createPet costs'],
      [{ perMinute: 10 }, 'body/limits/perDay is required: limits without windows take both perMinute and perDay'],
      [{ concurrency: 3 }, 'body/limits/perMinute is required'],
      [[], 'body/limits must be a list of 1 to 5 windows'],
    ] as const) {
      const response = await admin.request('POST', '/admin/v1/customers', { json: { externalId: 'cus_bad_windows', limits } });
      expectError(response, 400, 'bad_request');
      expect(response.body.message, JSON.stringify(limits)).toContain(message);
    }
    expect((await admin.request('GET', '/admin/v1/customers?externalId=cus_bad_windows')).body).toEqual([]);
  });
});
