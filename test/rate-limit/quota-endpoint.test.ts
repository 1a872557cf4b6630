import { describe, expect } from 'vitest';
import { describeAppTest } from '../support/fixtures.js';
import { keyInFreshWindows } from '../support/keys.js';
import { RATE_LIMIT_STORES, REDIS_URL } from '../support/redis.js';
import { DAY, MINUTE, T0 } from '../support/time.js';
import { minuteAndDay } from '../../src/plans/limits.js';

describe.each(RATE_LIMIT_STORES)('GET /v1/rate_limit with the $name store', (store) => {
  const test = describeAppTest({
    clock: T0,
    envAtBuild: () => ({
      ...store.env(),
      RATE_LIMIT_COSTS: 'createPet=5',
      RATE_LIMIT_BAN_THRESHOLD: '2',
      RATE_LIMIT_CONCURRENCY: 'free=3',
    }),
  });

  describe.skipIf(store.usesRedis && !REDIS_URL)('', () => {
    test("tells the key's standing, spending nothing of it, and has a limit of its own", async ({ t, clock }) => {
      const { headers } = await keyInFreshWindows(t.app, clock, { plan: 'free' }, 10 * MINUTE + 30_000);
      const lookup = () => t.app.inject({ url: '/v1/rate_limit', headers });
      expect((await t.app.inject({ method: 'POST', url: '/v1/pets', payload: { name: 'Rex', categoryId: 1 }, headers })).statusCode).toBe(
        201,
      );
      expect((await t.app.inject({ url: '/v1/pets?limit=1', headers })).statusCode).toBe(200);

      const minuteReset = Math.ceil((Math.floor(clock.now() / MINUTE) + 1) * (MINUTE / 1000));
      const dayReset = (Math.floor(clock.now() / DAY) + 1) * (DAY / 1000);
      for (let i = 0; i < 60; i++) {
        const answer = await lookup();
        expect(answer.statusCode).toBe(200);
        expect(answer.json()).toEqual({
          plan: 'free',
          windows: [
            { name: 'minute', limit: 60, remaining: 54, windowSeconds: 60, resetAt: new Date(minuteReset * 1000).toISOString() },
            { name: 'day', limit: 1_000, remaining: 994, windowSeconds: 86_400, resetAt: new Date(dayReset * 1000).toISOString() },
          ],
          minute: { limit: 60, remaining: 54, used: 6, reset: minuteReset },
          day: { limit: 1_000, remaining: 994, used: 6, reset: dayReset },
          concurrency: { limit: 3, inFlight: 0 },
          // No prepaid credits (test/credits/spending.test.ts tells them).
          credits: null,
          costs: { listPets: 1, createPet: 5, getPet: 1 },
        });
        expect(answer.headers['x-ratelimit-remaining']).toBe('54');
      }
      // The 61st lookup of the minute is refused; the key's own requests are not.
      const refused = await lookup();
      expect(refused.statusCode).toBe(429);
      expect(refused.json()).toMatchObject({ code: 'rate_limited', status: 429 });
      expect(refused.json().message).toBe('GET /v1/rate_limit answers 60 times a minute per API key; retry after the Retry-After delay');
      expect(refused.headers['retry-after']).toBe('30');
      expect((await t.app.inject({ url: '/v1/pets?limit=1', headers })).headers['x-ratelimit-remaining']).toBe('53');
      clock.advance(MINUTE);
      expect((await lookup()).json().minute).toMatchObject({ remaining: 60, used: 0 });
    });

    test('a key with its window spent still looks; refusals past the ban threshold there ban no one; a banned key gets its 429 there', async ({
      t,
      clock,
    }) => {
      const { headers } = await keyInFreshWindows(t.app, clock, { plan: 'enterprise', limits: minuteAndDay(2, 100) }, 10 * MINUTE + 30_000);
      const lookup = () => t.app.inject({ url: '/v1/rate_limit', headers });
      for (let i = 0; i < 2; i++) expect((await t.app.inject({ url: '/v1/pets?limit=1', headers })).statusCode).toBe(200);
      const spent = await lookup();
      expect(spent.statusCode).toBe(200);
      expect(spent.json().minute).toMatchObject({ limit: 2, remaining: 0, used: 2 });
      expect(spent.json().concurrency).toEqual({ limit: null, inFlight: 0 });

      // Three refusals past the threshold of 2 ban the key: its lookup says so too.
      for (let i = 0; i < 3; i++) expect((await t.app.inject({ url: '/v1/pets?limit=1', headers })).statusCode).toBe(429);
      const banned = await lookup();
      expect(banned.statusCode).toBe(429);
      expect(banned.json().code).toBe('api_key_banned');
    });

    test("a dashboard polling past its lookups' limit bans nothing: refused well past the ban threshold, it looks again the next minute", async ({
      t,
      clock,
    }) => {
      const { headers } = await keyInFreshWindows(t.app, clock, { plan: 'free' }, 10 * MINUTE + 30_000);
      const lookup = () => t.app.inject({ url: '/v1/rate_limit', headers });
      for (let i = 0; i < 60; i++) expect((await lookup()).statusCode).toBe(200);
      for (let i = 0; i < 5; i++) expect((await lookup()).json()).toMatchObject({ code: 'rate_limited', status: 429 });
      clock.advance(MINUTE);
      const next = await lookup();
      expect(next.statusCode).toBe(200);
      expect(next.json().minute).toMatchObject({ used: 0 });
      expect((await t.app.inject({ url: '/v1/pets?limit=1', headers })).statusCode).toBe(200);
    });

    test('without a valid key: 401, counted against the address like any request', async ({ t }) => {
      const answer = await t.app.inject({ url: '/v1/rate_limit', headers: { authorization: 'Bearer psk_nothing' } });
      expect(answer.statusCode).toBe(401);
      expect(answer.headers['x-ratelimit-limit']).toBe('60');
    });
  });
});
