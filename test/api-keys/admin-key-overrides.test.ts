import { describe, expect } from 'vitest';
import { adminTest, createKey, expectError, type TestAdmin } from '../support/admin.js';
import { minuteAndDay } from '../../src/plans/limits.js';

// A create costs 5 units: a key's own windows must each hold that much.
const test = adminTest({ env: { RATE_LIMIT_COSTS: 'createPet=5' } });

const newestAudit = async (admin: TestAdmin) => (await admin.request('GET', '/admin/v1/audit?limit=1')).body[0];

const PRO = minuteAndDay(300, 10_000);

describe('overrides: a key of any plan with windows of its own', () => {
  test('a pro key’s three windows (one sliding) replace its plan’s, shown by GET and audited; null takes the plan’s again', async ({
    admin,
  }) => {
    const { id } = await createKey(admin, { plan: 'pro', name: 'burst' });
    const given = [
      { name: 'day', limit: 20_000, windowSeconds: 86_400 },
      { name: 'burst', limit: 10, windowSeconds: 1, algorithm: 'sliding' },
      { name: 'minute', limit: 600, windowSeconds: 60, algorithm: 'fixed' },
    ];
    const changed = await admin.request('PATCH', `/admin/v1/keys/${id}`, { json: { limits: given } });
    expect(changed.status, JSON.stringify(changed.body)).toBe(200);
    // Shortest first, each algorithm filled in; perMinute and perDay read the windows so named.
    const own = [
      { name: 'burst', limit: 10, windowSeconds: 1, algorithm: 'sliding' },
      { name: 'minute', limit: 600, windowSeconds: 60, algorithm: 'fixed' },
      { name: 'day', limit: 20_000, windowSeconds: 86_400, algorithm: 'fixed' },
    ];
    expect(changed.body).toMatchObject({ plan: 'pro', limits: own, perMinute: 600, perDay: 20_000 });
    expect((await admin.request('GET', `/admin/v1/keys/${id}`)).body).toEqual(changed.body);
    expect(await newestAudit(admin)).toMatchObject({
      action: 'key.update',
      keyId: id,
      details: { before: { limits: null, perMinute: 300, perDay: 10_000 }, after: { limits: own, perMinute: 600, perDay: 20_000 } },
    });

    const back = await admin.request('PATCH', `/admin/v1/keys/${id}`, { json: { limits: null } });
    expect(back.body).toMatchObject({ plan: 'pro', limits: null, perMinute: 300, perDay: 10_000 });
    expect(await newestAudit(admin)).toMatchObject({ details: { before: { limits: own }, after: { limits: null, perMinute: 300 } } });
    // Following the plan already: nothing changes, nothing is recorded.
    const audited = await newestAudit(admin);
    expect((await admin.request('PATCH', `/admin/v1/keys/${id}`, { json: { limits: null } })).status).toBe(200);
    expect(await newestAudit(admin)).toEqual(audited);
  });

  test('perMinute on a free key replaces its plan’s minute, keeping the day; a window without a minute shows perMinute null', async ({
    admin,
  }) => {
    const created = await createKey(admin, { plan: 'free', perMinute: 120 });
    expect(created).toMatchObject({
      limits: minuteAndDay(120, 1_000),
      perMinute: 120,
      perDay: 1_000,
    });
    const hourly = await admin.request('PATCH', `/admin/v1/keys/${created.id}`, {
      json: { limits: [{ name: 'hour', limit: 500, windowSeconds: 3_600 }] },
    });
    expect(hourly.body).toMatchObject({ limits: [{ name: 'hour', limit: 500, windowSeconds: 3_600 }], perMinute: null, perDay: null });
    // The short form adds a day beside the hour.
    const withDay = await admin.request('PATCH', `/admin/v1/keys/${created.id}`, { json: { perDay: 900 } });
    expect(withDay.body).toMatchObject({ limits: [{ name: 'hour' }, { name: 'day', limit: 900 }], perMinute: null, perDay: 900 });
  });

  test('a move to another plan takes its windows (unless the change gives limits); a rotation keeps the key’s own', async ({ admin }) => {
    const { id } = await createKey(admin, { plan: 'pro', limits: [{ name: 'second', limit: 5, windowSeconds: 1 }] });
    const rotated = await admin.request('POST', `/admin/v1/keys/${id}/rotate`, { json: { overlapSeconds: 0 } });
    expect(rotated.body).toMatchObject({ plan: 'pro', limits: [{ name: 'second', limit: 5 }], perMinute: null });
    const moved = await admin.request('PATCH', `/admin/v1/keys/${rotated.body.id}`, { json: { plan: 'business' } });
    expect(moved.body).toMatchObject({ plan: 'business', limits: null, perMinute: 1_000, perDay: 100_000 });
    const given = await admin.request('PATCH', `/admin/v1/keys/${rotated.body.id}`, { json: { plan: 'pro', perDay: 50 } });
    expect(given.body).toMatchObject({ plan: 'pro', limits: [...PRO.slice(0, 1), { ...PRO[1], limit: 50 }], perDay: 50 });
  });

  test('a plan not in the plans table is a 400 naming body/plan, on create and on change; nothing is written', async ({ t, admin }) => {
    const before = await t.app.apiKeysRepository.list();
    const created = await admin.request('POST', '/admin/v1/keys', { json: { plan: 'gold', perMinute: 10 } });
    expectError(created, 400, 'bad_request');
    expect(created.body.message).toBe('body/plan is gold, which names no plan');
    const { id } = await createKey(admin, { plan: 'free' });
    const changed = await admin.request('PATCH', `/admin/v1/keys/${id}`, { json: { plan: 'gold' } });
    expectError(changed, 400, 'bad_request');
    expect(changed.body.message).toBe('body/plan is gold, which names no plan');
    expect((await t.app.apiKeysRepository.list()).length).toBe(before.length + 1);
    expect((await admin.request('GET', `/admin/v1/keys/${id}`)).body).toMatchObject({ plan: 'free', limits: null });
  });

  test('bad windows are a 400 naming the field, on create and on change; nothing is written', async ({ t, admin }) => {
    const window = { name: 'minute', limit: 100, windowSeconds: 60 };
    const six = ['a', 'b', 'c', 'd', 'e', 'f'].map((name, i) => ({ name, limit: 100, windowSeconds: 60 * (i + 1) }));
    const cases: Array<[unknown, string]> = [
      [[{ ...window, windowSeconds: 0 }], 'body/limits/0/windowSeconds must be an integer from 1 to 2678400'],
      [
        [window, { name: 'month', limit: 100, windowSeconds: 2_678_401 }],
        'body/limits/1/windowSeconds must be an integer from 1 to 2678400',
      ],
      [six, 'body/limits must be a list of 1 to 5 windows'],
      [[], 'body/limits must be a list of 1 to 5 windows'],
      [
        [window, { ...window, windowSeconds: 3_600 }],
        'body/limits/1/name repeats the window name minute: each window of a list has a name of its own',
      ],
      [[{ ...window, limit: 0 }], 'body/limits/0/limit must be an integer from 1 to 2147483647'],
      [[{ ...window, algorithm: 'leaky' }], 'body/limits/0/algorithm must be fixed or sliding'],
      [[{ ...window, name: 'Minute' }], 'body/limits/0/name must be a lower-case letter'],
      [[{ ...window, burst: 3 }], 'body/limits/0'],
      [[window, { ...window, name: 'tiny', limit: 4 }], 'body/limits/1/limit is 4, less than the 5 units createPet costs'],
      ['minute', 'body/limits must be a list of 1 to 5 windows, or null'],
    ];
    const { id } = await createKey(admin, { plan: 'pro' });
    const before = await t.app.apiKeysRepository.list();
    const audited = await newestAudit(admin);
    for (const [limits, message] of cases) {
      const created = await admin.request('POST', '/admin/v1/keys', { json: { plan: 'pro', limits } });
      expectError(created, 400, 'bad_request');
      expect(created.body.message, JSON.stringify(limits)).toContain(message);
      const changed = await admin.request('PATCH', `/admin/v1/keys/${id}`, { json: { limits } });
      expectError(changed, 400, 'bad_request');
      expect(changed.body.message, JSON.stringify(limits)).toContain(message);
    }
    // The short form that adds a sixth window.
    const five = six.slice(0, 5);
    const sixth = await admin.request('POST', '/admin/v1/keys', { json: { plan: 'pro', limits: five, perDay: 10 } });
    expectError(sixth, 400, 'bad_request');
    expect(sixth.body.message).toBe('body/perDay would make 6 windows; a list has 5 at most');
    expect(await t.app.apiKeysRepository.list()).toEqual(before);
    expect(await newestAudit(admin)).toEqual(audited);
  });
});
