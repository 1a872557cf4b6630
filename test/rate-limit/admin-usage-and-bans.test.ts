import { describe, expect, test } from 'vitest';
import { adminFixture, createKey, expectError, openAdmin } from '../support/admin.js';
import { buildTestApp } from '../support/app.js';
import { eventually } from '../support/eventually.js';
import { describeAppTest } from '../support/fixtures.js';
import { bearer, waitForKeyOnApp } from '../support/keys.js';
import { countKeys } from '../../harness/redis.js';
import { RATE_LIMIT_STORES, REDIS_URL, startRedis } from '../support/redis.js';
import { DAY, MINUTE, T0, testClock } from '../support/time.js';

// Usage and bans, read from and lifted in each store the limiter may use, on a clock that stands still so windows hold.
describe.each([
  { ...RATE_LIMIT_STORES[0]!, source: 'memory' },
  { ...RATE_LIMIT_STORES[1]!, source: 'redis' },
  // Redis configured and unreachable (nothing listens on port 1): the limiter counts in memory, and usage says so.
  { name: 'unreachable Redis', usesRedis: false, env: () => ({ REDIS_URL: 'redis://127.0.0.1:1' }), source: 'memory' },
])('usage and bans with the $name store', ({ usesRedis, env, source }) => {
  const test = describeAppTest({ clock: T0, env: { RATE_LIMIT_BAN_THRESHOLD: '1' }, envAtBuild: env }).extend('admin', adminFixture);

  describe.skipIf(usesRedis && !REDIS_URL)('', () => {
    test('usage shows every window and the ban from the store the limiter decides with; lifting the ban ends it there', async ({
      t,
      clock,
      admin,
    }) => {
      const { id, key } = await createKey(admin, { plan: 'enterprise', perMinute: 3, perDay: 100 });
      // The first request that finds the key counts; the 401s before it count against the address.
      await waitForKeyOnApp(t.app, bearer(key));
      const get = async () => (await t.app.inject({ url: '/v1/pets', headers: bearer(key) })).json<{ code?: string }>();
      await get();
      await get();
      const usage = async () => (await admin.request('GET', `/admin/v1/keys/${id}/usage`, { headers: bearer(admin.read.token) })).body;
      const minuteEnds = new Date(T0 + MINUTE).toISOString();
      const dayEnds = new Date(T0 - (T0 % DAY) + DAY).toISOString();
      expect(await usage()).toEqual({
        windows: [
          { name: 'minute', windowSeconds: 60, limit: 3, used: 3, resetAt: minuteEnds },
          { name: 'day', windowSeconds: 86_400, limit: 100, used: 3, resetAt: dayEnds },
        ],
        minute: { limit: 3, used: 3, resetAt: minuteEnds },
        day: { limit: 100, used: 3, resetAt: dayEnds },
        bannedUntil: null,
        source,
      });
      // Reading usage counts nothing.
      expect((await usage()).minute.used).toBe(3);
      if (usesRedis) expect(await countKeys(REDIS_URL!, t.app.config.REDIS_KEY_PREFIX)).toBeGreaterThan(0);

      // Threshold 1: the second refusal in the minute starts a ban of RATE_LIMIT_BAN_SECONDS (900).
      expect((await get()).code).toBe('rate_limited');
      expect((await get()).code).toBe('api_key_banned');
      expect((await usage()).bannedUntil).toBe(new Date(T0 + 900_000).toISOString());

      const lifted = await admin.request('DELETE', `/admin/v1/keys/${id}/ban`);
      expect(lifted.status).toBe(204);
      expect(await usage()).toMatchObject({ bannedUntil: null, minute: { used: 3 } });
      // No longer banned: the minute is still spent, so the next request is limited, and the one after the minute is served.
      expect((await get()).code).toBe('rate_limited');
      clock.advance(MINUTE);
      expect((await t.app.inject({ url: '/v1/pets', headers: bearer(key) })).statusCode).toBe(200);
      expect((await admin.request('DELETE', `/admin/v1/keys/${id}/ban`)).status).toBe(204);

      const [entry] = (await admin.request('GET', '/admin/v1/audit?limit=1')).body;
      expect(entry).toMatchObject({ action: 'key.ban_lift', keyId: id, adminTokenId: admin.write.id, details: { source } });
      expectError(await admin.request('GET', '/admin/v1/keys/999999999/usage'), 404, 'not_found');
      expectError(await admin.request('DELETE', '/admin/v1/keys/999999999/ban'), 404, 'not_found');
    });

    test('lists the banned addresses from the store the limiter decides with, and lifts the ban of one there', async ({
      t,
      clock,
      admin,
    }) => {
      clock.advance(DAY);
      const now = clock.now();
      const send = async (address: string) =>
        (await t.app.inject({ url: '/v1/pets', remoteAddress: address })).json<{ code: string }>().code;
      // Threshold 1: 60 requests without a key, then a refusal, and the second refusal starts a ban.
      for (const address of ['192.0.2.9', '2001:db8:5:6::7']) {
        for (let i = 0; i < 61; i++) await send(address);
        expect(await send(address)).toBe('api_key_banned');
      }
      const bannedUntil = new Date(now + 900_000).toISOString();
      const listed = await admin.request('GET', '/admin/v1/address-bans', { headers: bearer(admin.read.token) });
      expect(listed.status).toBe(200);
      expect(listed.body).toEqual({
        bans: [
          { address: '192.0.2.9', bannedUntil },
          { address: '2001:db8:5:6::/64', bannedUntil },
        ],
        source,
      });

      // Any address of the /64 names it; so does the listed form.
      expect((await admin.request('DELETE', `/admin/v1/address-bans/${encodeURIComponent('2001:db8:5:6::ffff')}`)).status).toBe(204);
      expect(await send('2001:db8:5:6::7')).toBe('rate_limited');
      expect((await admin.request('GET', '/admin/v1/address-bans')).body.bans).toEqual([{ address: '192.0.2.9', bannedUntil }]);
      const [entry] = (await admin.request('GET', '/admin/v1/audit?limit=1')).body;
      expect(entry).toMatchObject({
        action: 'address.ban_lift',
        keyId: null,
        adminTokenId: admin.write.id,
        details: { address: '2001:db8:5:6::/64', bannedUntil, source },
      });
      expect((await admin.request('DELETE', `/admin/v1/address-bans/${encodeURIComponent('192.0.2.9')}`)).status).toBe(204);
      expect((await admin.request('GET', '/admin/v1/address-bans')).body.bans).toEqual([]);
      expect((await admin.request('DELETE', `/admin/v1/address-bans/${encodeURIComponent('192.0.2.9')}`)).status).toBe(204);
      expectError(await admin.request('DELETE', '/admin/v1/address-bans/not-an-address'), 400, 'bad_request');
    });

    test('a rotated key and its successor show one quota', async ({ t, admin }) => {
      const { id, key } = await createKey(admin, { plan: 'free' });
      await waitForKeyOnApp(t.app, bearer(key));
      const rotated = await admin.request('POST', `/admin/v1/keys/${id}/rotate`, { json: { overlapSeconds: 600 } });
      await waitForKeyOnApp(t.app, bearer(rotated.body.key));
      const used = async (keyId: number) => (await admin.request('GET', `/admin/v1/keys/${keyId}/usage`)).body.minute.used;
      expect([await used(id), await used(rotated.body.id)]).toEqual([2, 2]);
    });
  });
});

describe.skipIf(!REDIS_URL)('usage during a Redis outage (a private Redis server)', () => {
  test("answers from this instance's memory and says so, and from Redis again once it is back", async () => {
    const redis = await startRedis();
    const clock = testClock(T0);
    const t = await buildTestApp({ REDIS_URL: redis.url, REDIS_KEY_PREFIX: 'outage:' }, { now: clock.now });
    const admin = await openAdmin(t.app);
    try {
      const { id, key } = await createKey(admin, { plan: 'free' });
      await waitForKeyOnApp(t.app, bearer(key));
      const get = async () => (await t.app.inject({ url: '/v1/pets', headers: bearer(key) })).statusCode;
      expect(await get()).toBe(200);
      const usage = async () => (await admin.request('GET', `/admin/v1/keys/${id}/usage`)).body;
      expect(await usage()).toMatchObject({ source: 'redis', minute: { used: 2 }, day: { used: 2 } });

      await redis.stop();
      // The first decision that fails moves the limiter to memory, which has counted nothing of this key before.
      expect(await get()).toBe(200);
      expect(await usage()).toMatchObject({ source: 'memory', minute: { used: 1 }, day: { used: 1 } });
      expect(t.logs.entries().some((entry) => String(entry.msg).includes('Redis unreachable'))).toBe(true);

      await redis.start();
      // Redis came back empty; once the probe finds it, counting and usage are there again.
      await eventually(async () => (await usage()).source === 'redis', 5_000);
      expect(await get()).toBe(200);
      expect(await usage()).toMatchObject({ source: 'redis', minute: { used: 1 } });
    } finally {
      await admin.close();
      await t.close();
      await redis.stop().catch(() => {});
    }
  });
});
