import { describe, expect, it } from 'vitest';
import { createKey, openAdmin } from '../support/admin.js';
import { buildTestApp, type TestApp } from '../support/app.js';
import { eventually } from '../support/eventually.js';
import { bearer, waitForKeyOnApp } from '../support/keys.js';
import { RATE_LIMIT_STORES, REDIS_URL } from '../support/redis.js';

// A decrement starts a new version from what really remained less its amount, as a set does (docs/decisions/credits.md):
// credits.low's amount is then that result, and each threshold is told again below it.

const WEBHOOKS = {
  WEBHOOK_URL: 'http://127.0.0.1:9/hooks',
  WEBHOOK_SECRET: 'a-webhook-secret-of-32-characters-or-more',
  CREDITS_LOW_THRESHOLDS: '50',
};

/** The credits.low events the outbox holds, oldest first, as `version:threshold` with their remaining and amount. */
async function lowEvents(t: TestApp) {
  const rows = await t.db.query<{ dedupe_key: string; body: string }>(
    "SELECT dedupe_key, body FROM webhook_deliveries WHERE type = 'credits.low' ORDER BY id",
  );
  return rows.map(({ dedupe_key, body }) => {
    const { remaining, amount } = (JSON.parse(body) as { data: { remaining: number; amount: number } }).data;
    return { told: dedupe_key.split(':').slice(2).join(':'), remaining, amount };
  });
}

describe.each(RATE_LIMIT_STORES)('credits.low after a decrement, with the $name store', (store) => {
  it.skipIf(store.usesRedis && !REDIS_URL)('is told again in the new version, of the amount the decrement left', async () => {
    const t = await buildTestApp({ ...WEBHOOKS, ...store.env() });
    const admin = await openAdmin(t.app);
    try {
      const key = await createKey(admin, { plan: 'enterprise', perMinute: 1000, perDay: 10000, credits: { remaining: 100 } });
      const headers = bearer(key.key);
      // Its first request, waited for, spends 1.
      await waitForKeyOnApp(t.app, headers);
      const spend = async (count: number) => {
        for (let i = 0; i < count; i++) expect((await t.app.inject({ url: '/v1/pets?limit=1', headers })).statusCode).toBe(200);
      };
      await spend(50);
      await eventually(async () => (await lowEvents(t)).length === 1);
      // 49 left, less 9: a new version of 40.
      const decremented = await admin.request('POST', `/admin/v1/keys/${key.id}/credits`, { json: { operation: 'decrement', amount: 9 } });
      expect(decremented.body).toMatchObject({ remaining: 40 });
      expect(await t.app.keyNotices.catchUp()).toBe(true);
      await spend(20);
      expect(await lowEvents(t)).toEqual([{ told: '1:50', remaining: 49, amount: 100 }]);
      await spend(1);
      await eventually(async () => (await lowEvents(t)).length === 2);
      expect(await lowEvents(t)).toEqual([
        { told: '1:50', remaining: 49, amount: 100 },
        { told: '2:50', remaining: 19, amount: 40 },
      ]);
    } finally {
      await admin.close();
      await t.close();
    }
  });
});
