import { describe, expect } from 'vitest';
import { minuteAndDay } from '../../src/plans/limits.js';
import { adminTest, openAdmin } from '../support/admin.js';
import { POSTGRES_URL } from '../support/databases.js';
import { eventually } from '../support/eventually.js';
import { twoInstancesTest } from '../support/fixtures.js';

/** The warnings an app logged at start about a setting overriding a plan's row. */
const overrideWarnings = (entries: Record<string, unknown>[]) =>
  entries.filter((entry) => entry.level === 40 && typeof entry.setting === 'string').map((entry) => entry.msg as string);

const test = adminTest();
const overriding = adminTest({ env: { RATE_LIMIT_SHADOW_PLANS: 'pro', RATE_LIMIT_CONCURRENCY: 'free=2,business=50' } });

describe('with the settings at their defaults', () => {
  test('the seed plans, with the concurrency of their rows (RATE_LIMIT_CONCURRENCY unset); no warning', async ({ t }) => {
    expect(t.app.plans.get('free')).toEqual({ name: 'free', limits: minuteAndDay(60, 1000), concurrency: 5, shadow: false });
    expect(t.app.plans.get('pro')).toEqual({ name: 'pro', limits: minuteAndDay(300, 10_000), concurrency: 20, shadow: false });
    expect(t.app.plans.get('business')).toEqual({ name: 'business', limits: minuteAndDay(1000, 100_000), concurrency: 50, shadow: false });
    expect(t.app.plans.get('enterprise')).toEqual({ name: 'enterprise', limits: null, concurrency: 100, shadow: false });
    expect(t.app.plans.get('nosuch')).toBeUndefined();
    expect(overrideWarnings(t.logs.entries())).toEqual([]);
  });

  test('a change, a new plan and a delete through the admin API reach the book without a restart', async ({ t, admin }) => {
    const limits = [{ name: 'second', limit: 5, windowSeconds: 1, algorithm: 'sliding' }];
    expect((await admin.request('POST', '/admin/v1/plans', { json: { name: 'burst', limits, concurrency: 3 } })).status).toBe(201);
    await eventually(async () => t.app.plans.get('burst') !== undefined, 1_000);
    expect(t.app.plans.get('burst')).toEqual({ name: 'burst', limits, concurrency: 3, shadow: false });
    expect((await admin.request('PATCH', '/admin/v1/plans/burst', { json: { shadow: true, concurrency: null } })).status).toBe(200);
    await eventually(async () => t.app.plans.get('burst')?.shadow === true, 1_000);
    expect(t.app.plans.get('burst')).toMatchObject({ concurrency: null, shadow: true });
    expect((await admin.request('DELETE', '/admin/v1/plans/burst')).status).toBe(204);
    await eventually(async () => t.app.plans.get('burst') === undefined, 1_000);
  });
});

describe('RATE_LIMIT_SHADOW_PLANS and RATE_LIMIT_CONCURRENCY set', () => {
  overriding('the settings win over the rows, and the start warns once per plan they name, saying how to move', async ({ t, admin }) => {
    // Set, RATE_LIMIT_CONCURRENCY decides every plan, as it always did: a plan it does not name has no limit.
    expect(t.app.plans.get('pro')).toMatchObject({ shadow: true, concurrency: null });
    expect(t.app.plans.get('free')).toMatchObject({ shadow: false, concurrency: 2 });
    expect(t.app.plans.get('business')).toMatchObject({ shadow: false, concurrency: 50 });
    expect(t.app.plans.get('enterprise')).toMatchObject({ shadow: false, concurrency: null });
    const warnings = overrideWarnings(t.logs.entries());
    // business=50 is its row's value: nothing to move there.
    expect(warnings).toEqual([
      expect.stringMatching(
        /^RATE_LIMIT_SHADOW_PLANS sets the pro plan's shadow mode to true, overriding its row \(false\); to move it: PATCH \/admin\/v1\/plans\/pro \{"shadow": true\}.*then take pro out of RATE_LIMIT_SHADOW_PLANS$/,
      ),
      expect.stringMatching(/^RATE_LIMIT_CONCURRENCY sets the enterprise plan's concurrency to null, overriding its row \(100\)/),
      expect.stringMatching(
        /^RATE_LIMIT_CONCURRENCY sets the free plan's concurrency to 2, overriding its row \(5\); to move it: PATCH \/admin\/v1\/plans\/free \{"concurrency": 2\}.*then unset RATE_LIMIT_CONCURRENCY once every plan's row holds what it says/,
      ),
      expect.stringMatching(/^RATE_LIMIT_CONCURRENCY sets the pro plan's concurrency to null, overriding its row \(20\)/),
    ]);
    // A row changed under a setting: the setting still wins; the rest of the row applies.
    expect((await admin.request('PATCH', '/admin/v1/plans/free', { json: { concurrency: 7, shadow: true } })).status).toBe(200);
    expect((await admin.request('PATCH', '/admin/v1/plans/pro', { json: { concurrency: 9 } })).status).toBe(200);
    await eventually(async () => t.app.plans.get('free')?.shadow === true, 1_000);
    expect(t.app.plans.get('free')).toMatchObject({ shadow: true, concurrency: 2 });
    expect(t.app.plans.get('pro')).toMatchObject({ shadow: true, concurrency: null });
  });
});

const twoInstances = twoInstancesTest();

describe.runIf(POSTGRES_URL)('two instances', () => {
  twoInstances(
    'a plan changed through one instance is applied by the other within a second, without a restart',
    async ({ instances: { a, b } }) => {
      const admin = await openAdmin(a.app);
      try {
        const limits = [
          { name: 'second', limit: 5, windowSeconds: 1, algorithm: 'fixed' },
          { name: 'minute', limit: 120, windowSeconds: 60, algorithm: 'sliding' },
        ];
        expect(b.app.plans.get('pro')?.limits).toEqual(minuteAndDay(300, 10_000));
        const sent = Date.now();
        const changed = await admin.request('PATCH', '/admin/v1/plans/pro', { json: { limits } });
        expect(changed.status, JSON.stringify(changed.body)).toBe(200);
        await eventually(
          async () => b.app.plans.get('pro')?.limits?.length === 2 && b.app.plans.get('pro')!.limits![0]!.name === 'second',
          1_000,
        );
        const appliedMs = Date.now() - sent;
        expect(b.app.plans.get('pro')).toEqual({ name: 'pro', limits, concurrency: 20, shadow: false });
        expect((await admin.request('POST', '/admin/v1/plans', { json: { name: 'team', limits } })).status).toBe(201);
        await eventually(async () => b.app.plans.get('team') !== undefined, 1_000);
        expect((await admin.request('DELETE', '/admin/v1/plans/team')).status).toBe(204);
        await eventually(async () => b.app.plans.get('team') === undefined, 1_000);
        console.log(`a plan's change applied by the other instance ${appliedMs} ms after the PATCH was sent`);
      } finally {
        await admin.close();
      }
    },
  );
});
