import { describe, expect } from 'vitest';
import type { UsageWatcher } from '../../src/rate-limit/admission.js';
import { describeAppTest } from '../support/fixtures.js';
import { keyInFreshWindows } from '../support/keys.js';
import { RATE_LIMIT_STORES, REDIS_URL } from '../support/redis.js';
import { T0 } from '../support/time.js';
import { minuteAndDay } from '../../src/plans/limits.js';

describe.each(RATE_LIMIT_STORES)('watching usage with the $name store', (store) => {
  const test = describeAppTest({
    clock: T0,
    envAtBuild: () => ({ ...store.env(), RATE_LIMIT_COSTS: 'createPet=5', RATE_LIMIT_BAN_THRESHOLD: '2' }),
  });

  describe.skipIf(store.usesRedis && !REDIS_URL)('', () => {
    test('hears each threshold a request takes a window across, once, and the ban a key starts', async ({ t, clock }) => {
      const heard: string[] = [];
      const watcher: UsageWatcher = {
        thresholds: [50, 100],
        crossed: ({ key, window, limit, used, threshold }) => heard.push(`${key.plan} ${window} ${threshold}%: ${used}/${limit}`),
        banned: ({ key, bannedUntil }) => heard.push(`${key.plan} banned for ${(bannedUntil - clock.now()) / 1000} s`),
      };
      const { headers } = await keyInFreshWindows(t.app, clock, { plan: 'enterprise', limits: minuteAndDay(12, 100) });
      t.app.rateLimit.watchUsage(watcher);
      const list = () => t.app.inject({ url: '/v1/pets?limit=1', headers });
      const create = () => t.app.inject({ method: 'POST', url: '/v1/pets', payload: { name: 'Rex', categoryId: 1 }, headers });

      for (let i = 0; i < 5; i++) expect((await list()).statusCode).toBe(200);
      expect(heard).toEqual([]);
      // 5 units to 10 of 12: past 50% (6) at once, and a window's 50% of the day (50) is far.
      expect((await create()).statusCode).toBe(201);
      expect(heard).toEqual(['enterprise minute 50%: 10/12']);
      expect((await list()).statusCode).toBe(200);
      expect((await list()).statusCode).toBe(200);
      expect(heard.at(-1)).toBe('enterprise minute 100%: 12/12');
      for (let i = 0; i < 3; i++) expect((await list()).statusCode).toBe(429);
      expect(heard).toEqual(['enterprise minute 50%: 10/12', 'enterprise minute 100%: 12/12', 'enterprise banned for 900 s']);
    });
  });
});
