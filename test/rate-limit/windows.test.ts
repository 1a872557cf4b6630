import type { FastifyInstance } from 'fastify';
import { describe, expect } from 'vitest';
import { openAdmin } from '../support/admin.js';
import { eventually } from '../support/eventually.js';
import { describeAppTest } from '../support/fixtures.js';
import { bearer, keyInFreshWindows, waitForKey } from '../support/keys.js';
import { RATE_LIMIT_STORES, REDIS_URL } from '../support/redis.js';
import { DAY, MINUTE, T0, type TestClock } from '../support/time.js';

// Issue 56: limits are data. Plans made through the admin API, with named windows, fixed or
// sliding, decided on both stores; the seed's plans answer as they always did.

type Window = { name: string; limit: number; windowSeconds: number; algorithm?: 'fixed' | 'sliding' };

/** A plan made through the admin API, once this instance's plan book holds it. */
async function makePlan(app: FastifyInstance, admin: Awaited<ReturnType<typeof openAdmin>>, name: string, limits: Window[]) {
  const response = await admin.request('POST', '/admin/v1/plans', { json: { name, limits } });
  expect(response.status, JSON.stringify(response.body)).toBe(201);
  await eventually(async () => app.plans.get(name) !== undefined);
}

/** A key made through the admin API, known to the app, with the clock then at the start of a day none of its windows counted in. */
async function keyOnPlan(app: FastifyInstance, admin: Awaited<ReturnType<typeof openAdmin>>, clock: TestClock, body: object) {
  const response = await admin.request('POST', '/admin/v1/keys', { json: { name: 'windows', ...body } });
  expect(response.status, JSON.stringify(response.body)).toBe(201);
  const { id, key } = response.body as { id: number; key: string };
  const headers = bearer(key);
  await waitForKey(async () => {
    clock.advance(DAY);
    return (await app.inject({ url: '/v1/pets/0', headers })).statusCode;
  });
  clock.set((Math.floor(clock.now() / DAY) + 1) * DAY);
  return { id, headers };
}

const pets = (app: FastifyInstance, headers: Record<string, string>) => app.inject({ url: '/v1/pets?limit=1', headers });

describe.each(RATE_LIMIT_STORES)('named windows with the $name store', (store) => {
  const test = describeAppTest({ clock: T0, envAtBuild: () => ({ ...store.env(), RATE_LIMIT_BAN_THRESHOLD: '1000' }) });

  describe.skipIf(store.usesRedis && !REDIS_URL)(`on ${store.name}`, () => {
    test('a key of a seed plan gets the headers it always had, byte for byte', async ({ t, clock }) => {
      const { headers } = await keyInFreshWindows(t.app, clock, { plan: 'free', name: 'seed' });
      const first = await pets(t.app, headers);
      expect(first.statusCode).toBe(200);
      const minuteEnd = Math.floor(clock.now() / MINUTE) * MINUTE + MINUTE;
      const dayEnd = Math.floor(clock.now() / DAY) * DAY + DAY;
      expect({
        limit: first.headers['x-ratelimit-limit'],
        remaining: first.headers['x-ratelimit-remaining'],
        reset: first.headers['x-ratelimit-reset'],
        policy: first.headers['ratelimit-policy'],
        left: first.headers.ratelimit,
      }).toEqual({
        limit: '60',
        remaining: '59',
        reset: String(minuteEnd / 1000),
        policy: '"minute";q=60;w=60, "day";q=1000;w=86400',
        left: `"minute";r=59;t=${(minuteEnd - clock.now()) / 1000}, "day";r=999;t=${(dayEnd - clock.now()) / 1000}`,
      });
    });

    test('a sliding window refuses at a boundary the burst that a fixed one of the same shape serves', async ({ t, clock }) => {
      const admin = await openAdmin(t.app);
      try {
        const burst = { name: 'burst', limit: 5, windowSeconds: 10 };
        await makePlan(t.app, admin, `fixed-${store.name}`, [burst]);
        await makePlan(t.app, admin, `sliding-${store.name}`, [{ ...burst, algorithm: 'sliding' }]);
        const fixed = await keyOnPlan(t.app, admin, clock, { plan: `fixed-${store.name}` });
        const sliding = await keyOnPlan(t.app, admin, clock, { plan: `sliding-${store.name}` });
        const dayStart = clock.now();

        // The whole limit spent in the last second of a 10-second window...
        clock.set(dayStart + 9_000);
        for (const key of [fixed, sliding]) for (let i = 0; i < 5; i++) expect((await pets(t.app, key.headers)).statusCode).toBe(200);
        expect((await pets(t.app, fixed.headers)).statusCode).toBe(429);

        // ...and half a second into the next: the fixed window starts from 0, the sliding one still counts 95% of the last.
        clock.set(dayStart + 10_500);
        expect((await pets(t.app, fixed.headers)).statusCode).toBe(200);
        const refused = await pets(t.app, sliding.headers);
        expect(refused.statusCode).toBe(429);
        expect(refused.json()).toMatchObject({ code: 'rate_limited' });
        expect(refused.headers['ratelimit-policy']).toBe('"burst";q=5;w=10');
        // Room for one once the previous window's share is down to 4 of 5: 2 s into this one.
        expect(refused.headers['retry-after']).toBe('2');
        expect(refused.headers['x-ratelimit-reset']).toBe(String((dayStart + 12_000) / 1000));

        clock.set(dayStart + 12_000);
        expect((await pets(t.app, sliding.headers)).statusCode).toBe(200);
        expect((await pets(t.app, sliding.headers)).statusCode).toBe(429);
      } finally {
        await admin.close();
      }
    });

    test('three windows: served only while each has room, counted in all, the binding one in X-RateLimit-*', async ({ t, clock }) => {
      const admin = await openAdmin(t.app);
      try {
        const plan = `three-${store.name}`;
        await makePlan(t.app, admin, plan, [
          { name: 'day', limit: 10, windowSeconds: 86_400 },
          { name: 'second', limit: 2, windowSeconds: 1 },
          { name: 'minute', limit: 4, windowSeconds: 60 },
        ]);
        const { headers } = await keyOnPlan(t.app, admin, clock, { plan });
        const first = await pets(t.app, headers);
        expect(first.headers['ratelimit-policy']).toBe('"second";q=2;w=1, "minute";q=4;w=60, "day";q=10;w=86400');
        expect(first.headers.ratelimit).toBe('"second";r=1;t=1, "minute";r=3;t=60, "day";r=9;t=86400');
        expect([first.headers['x-ratelimit-limit'], first.headers['x-ratelimit-remaining']]).toEqual(['2', '1']);

        expect((await pets(t.app, headers)).statusCode).toBe(200);
        const secondFull = await pets(t.app, headers);
        expect(secondFull.statusCode).toBe(429);
        expect(secondFull.headers['retry-after']).toBe('1');
        expect(secondFull.json().message).toContain('2 requests per second window (1 s)');

        clock.advance(1_000);
        expect((await pets(t.app, headers)).statusCode).toBe(200);
        expect((await pets(t.app, headers)).statusCode).toBe(200);
        clock.advance(1_000);
        // The minute is spent (4): it binds, and the wait is the minute's, not the second's.
        const minuteFull = await pets(t.app, headers);
        expect(minuteFull.statusCode).toBe(429);
        expect(minuteFull.headers['x-ratelimit-limit']).toBe('4');
        expect(minuteFull.headers['retry-after']).toBe('58');
        expect(minuteFull.headers.ratelimit).toBe('"second";r=2;t=1, "minute";r=0;t=58, "day";r=6;t=86398');
      } finally {
        await admin.close();
      }
    });

    test('limits of its own replace a pro key’s plan windows, and null puts the plan’s back', async ({ t, clock }) => {
      const admin = await openAdmin(t.app);
      try {
        const { id, headers } = await keyOnPlan(t.app, admin, clock, { plan: 'pro' });
        expect((await pets(t.app, headers)).headers['ratelimit-policy']).toBe('"minute";q=300;w=60, "day";q=10000;w=86400');
        const own = [
          { name: 'burst', limit: 3, windowSeconds: 10, algorithm: 'sliding' },
          { name: 'hour', limit: 100, windowSeconds: 3_600 },
        ];
        expect((await admin.request('PATCH', `/admin/v1/keys/${id}`, { json: { limits: own } })).status).toBe(200);
        await eventually(async () => (await pets(t.app, headers)).headers['ratelimit-policy'] === '"burst";q=3;w=10, "hour";q=100;w=3600');
        clock.advance(MINUTE);
        for (let i = 0; i < 3; i++) expect((await pets(t.app, headers)).statusCode).toBe(200);
        expect((await pets(t.app, headers)).statusCode).toBe(429);

        expect((await admin.request('PATCH', `/admin/v1/keys/${id}`, { json: { limits: null } })).status).toBe(200);
        await eventually(
          async () => (await pets(t.app, headers)).headers['ratelimit-policy'] === '"minute";q=300;w=60, "day";q=10000;w=86400',
        );
      } finally {
        await admin.close();
      }
    });
  });
});
