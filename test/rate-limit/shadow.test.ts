import { describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { loadConfig } from '../../src/config/load.js';
import { buildTestApp } from '../support/app.js';
import { describeAppTest } from '../support/fixtures.js';
import { keyInFreshWindows } from '../support/keys.js';
import { RATE_LIMIT_STORES, REDIS_URL } from '../support/redis.js';
import { MINUTE, T0 } from '../support/time.js';
import { minuteAndDay } from '../../src/plans/limits.js';

const shadowRefusals = async (app: FastifyInstance) =>
  Object.fromEntries(
    (await app.metricsRegistry.getSingleMetric('rate_limit_shadow_refusals_total')!.get()).values.map(({ labels, value }) => [
      labels.plan,
      value,
    ]),
  );

describe('RATE_LIMIT_SHADOW_PLANS', () => {
  it('names plans; a plan there is not stops the start', async () => {
    expect(loadConfig({ RATE_LIMIT_SHADOW_PLANS: 'free,pro' }).rateLimitShadowPlans).toEqual(['free', 'pro']);
    expect(() => loadConfig({ RATE_LIMIT_SHADOW_PLANS: 'free;pro' })).toThrow('RATE_LIMIT_SHADOW_PLANS');
    await expect(buildTestApp({ RATE_LIMIT_SHADOW_PLANS: 'free,gold' })).rejects.toThrow(
      'Invalid RATE_LIMIT_SHADOW_PLANS: no plan gold; the plans are business, enterprise, free, pro',
    );
  });
});

describe.each(RATE_LIMIT_STORES)('shadow mode with the $name store', (store) => {
  const test = describeAppTest({
    clock: T0,
    envAtBuild: () => ({
      ...store.env(),
      RATE_LIMIT_SHADOW_PLANS: 'business',
      RATE_LIMIT_BAN_THRESHOLD: '2',
      RATE_LIMIT_CONCURRENCY: 'off',
    }),
  });

  describe.skipIf(store.usesRedis && !REDIS_URL)('', () => {
    test('a key with enforceLimits false is served past its limits, with the headers of a refusal, counted, logged once a minute, never banned', async ({
      t,
      clock,
    }) => {
      const { headers } = await keyInFreshWindows(t.app, clock, {
        plan: 'enterprise',
        limits: minuteAndDay(3, 100),
        enforceLimits: false,
      });
      const before = (await shadowRefusals(t.app)).enterprise ?? 0;
      const logged = () => t.logs.entries().filter((entry) => entry.msg === 'rate limit shadow refusal').length;
      for (let i = 0; i < 3; i++) expect((await t.app.inject({ url: '/v1/pets?limit=1', headers })).statusCode).toBe(200);

      // Past the ban threshold (2) of refusals, and still served.
      for (let i = 0; i < 5; i++) {
        const over = await t.app.inject({ url: '/v1/pets?limit=1', headers });
        expect(over.statusCode).toBe(200);
        expect(over.headers['x-ratelimit-remaining']).toBe('0');
        expect(over.headers['x-ratelimit-limit']).toBe('3');
        expect(over.headers['retry-after']).toBeUndefined();
      }
      expect((await shadowRefusals(t.app)).enterprise).toBe(before + 5);
      expect(logged()).toBe(1);
      expect(t.logs.entries().find((entry) => entry.msg === 'rate limit shadow refusal')).toMatchObject({
        plan: 'enterprise',
        window: 'minute',
      });

      // The next minute: its own first would-be refusal is logged.
      clock.advance(MINUTE);
      for (let i = 0; i < 4; i++) expect((await t.app.inject({ url: '/v1/pets?limit=1', headers })).statusCode).toBe(200);
      expect(logged()).toBe(2);
    });

    test('a plan in RATE_LIMIT_SHADOW_PLANS is served past its limits; the same limits enforced on another plan are not', async ({
      t,
      clock,
    }) => {
      const { headers: business } = await keyInFreshWindows(t.app, clock, { plan: 'business' });
      const { headers: enforced } = await keyInFreshWindows(t.app, clock, {
        plan: 'enterprise',
        limits: minuteAndDay(1_000, 100_000),
      });
      const before = (await shadowRefusals(t.app)).business ?? 0;
      const spend = (headers: { authorization: string }) =>
        Promise.all(Array.from({ length: 1_001 }, () => t.app.inject({ url: '/v1/pets/0', headers }).then((reply) => reply.statusCode)));
      const shadowed = await spend(business);
      expect(shadowed.filter((status) => status === 429)).toEqual([]);
      expect((await shadowRefusals(t.app)).business).toBe(before + 1);
      const refused = await spend(enforced);
      expect(refused.filter((status) => status === 429)).toHaveLength(1);
    });
  });
});
