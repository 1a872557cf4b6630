import { describe, expect, it } from 'vitest';
import type { CreditsLowEvent } from '../../src/rate-limit/credits.js';
import { minuteAndDay } from '../../src/plans/limits.js';
import { createCustomerRules } from '../../src/customers/rules.js';
import { KEYS_COMMAND } from '../support/admin.js';
import { buildTestApp, type TestApp } from '../support/app.js';
import { balanceRecord, insertBalance, type BalanceOwner } from '../support/credit-balances.js';
import { POSTGRES_URL } from '../support/databases.js';
import { eventually } from '../support/eventually.js';
import { bearer, waitForKeyOnApp } from '../support/keys.js';
import { RATE_LIMIT_STORES, REDIS_URL, redisStoreEnv, startRedis } from '../support/redis.js';
import { fallbackGauge } from '../support/scale.js';

// Issue 58, item 3: a balance's remaining falling below each of CREDITS_LOW_THRESHOLDS (percent of its
// base) records one credits.low event per balance, version and threshold, across all instances.

type Headers = { authorization: string };

/** Webhooks to a port where nothing listens (discard): deliveries fail, and the outbox keeps the events this file reads. */
const WEBHOOKS = {
  WEBHOOK_URL: 'http://127.0.0.1:9/hooks',
  WEBHOOK_SECRET: 'a-webhook-secret-of-32-characters-or-more',
  CREDITS_LOW_THRESHOLDS: '20,50',
};

interface LowEvent {
  dedupeKey: string;
  data: Record<string, unknown> & { threshold: number };
}

/** The credits.low events the outbox holds of a balance, by threshold, highest first. */
async function lowEvents(t: TestApp, balanceId: number): Promise<LowEvent[]> {
  const rows = await t.db.query<{ dedupe_key: string; body: string }>(
    "SELECT dedupe_key, body FROM webhook_deliveries WHERE type = 'credits.low' AND body::jsonb->'data'->>'balanceId' = $1",
    [String(balanceId)],
  );
  const events = rows.map((row) => ({ dedupeKey: row.dedupe_key, data: (JSON.parse(row.body) as LowEvent).data }));
  return events.sort((x, y) => y.data.threshold - x.data.threshold || x.dedupeKey.localeCompare(y.dedupeKey));
}

/**
 * What the limiter of an instance tells its watchers of low balances, heard by a watcher of the test's own beside the
 * webhooks' (app.rateLimit.watchUsage), with the same thresholds: each telling, as `balanceId:version:threshold`.
 */
function toldLow(t: TestApp) {
  const told: string[] = [];
  t.app.rateLimit.watchUsage({
    thresholds: [],
    crossed: () => {},
    banned: () => {},
    creditsLowThresholds: [20, 50],
    creditsLow: ({ balance, version, threshold }: CreditsLowEvent) => void told.push(`${balance.id}:${version}:${threshold}`),
  });
  return told;
}

/** A key of its own limits (far above what the tests spend: only the credits refuse), known to every instance. */
async function knownKey(instances: readonly TestApp[], customerId?: number) {
  const { key, record } = await instances[0]!.app.apiKeysRepository.create({
    plan: 'enterprise',
    limits: minuteAndDay(1e6, 2e6),
    ...(customerId === undefined ? {} : { customerId }),
  });
  for (const { app } of instances) await waitForKeyOnApp(app, bearer(key));
  return { headers: bearer(key), record };
}

/** A balance given to an owner, once every instance has heard of it (the key change notice of migrations/016). */
async function withBalance(instances: readonly TestApp[], owner: BalanceOwner, base: number) {
  const id = await insertBalance(instances[0]!.db, owner, base);
  for (const { app } of instances) expect(await app.keyNotices.catchUp()).toBe(true);
  return id;
}

/** A set (a new version, spending from 0 again), once every instance has heard of it. */
async function setAnew(instances: readonly TestApp[], id: number, base: number) {
  await instances[0]!.db.query('UPDATE credit_balances SET base = $2, spent = 0, version = version + 1 WHERE id = $1', [id, base]);
  for (const { app } of instances) expect(await app.keyNotices.catchUp()).toBe(true);
}

const read = (t: TestApp, headers: Headers) => t.app.inject({ url: '/v1/pets?limit=1', headers });
const create = (t: TestApp, headers: Headers) =>
  t.app.inject({ method: 'POST', url: '/v1/pets', payload: { name: 'Priced', categoryId: 1 }, headers });

async function statusesOf(t: TestApp, headers: Headers, count: number) {
  const statuses = [];
  for (let i = 0; i < count; i++) statuses.push((await read(t, headers)).statusCode);
  return statuses;
}

/** `count` apps on one database (the first's), built with `env`, closed after `use`. */
async function withApps(count: number, env: Record<string, string>, use: (instances: TestApp[]) => Promise<void>) {
  const instances: TestApp[] = [await buildTestApp({ ...WEBHOOKS, ...env })];
  try {
    while (instances.length < count) instances.push(await buildTestApp({ ...WEBHOOKS, ...env, DATABASE_URL: instances[0]!.databaseUrl! }));
    await use(instances);
  } finally {
    for (const t of instances.reverse()) await t.close();
  }
}

describe.each(RATE_LIMIT_STORES)('credits.low with the $name store', (store) => {
  describe.skipIf(store.usesRedis && !REDIS_URL)('one instance', () => {
    it("sends one event per threshold a key's balance falls below, with the exhausted event's data, the amount and the threshold", async () => {
      await withApps(1, store.env(), async ([t]) => {
        const told = toldLow(t!);
        const { headers, record } = await knownKey([t!]);
        const id = await withBalance([t!], { quotaId: record.quotaId }, 10);
        // 5 of 10 left is not below 50%: the 6th request leaves 4.
        expect(await statusesOf(t!, headers, 5)).toEqual(Array(5).fill(200));
        expect(told).toEqual([]);
        expect(await statusesOf(t!, headers, 1)).toEqual([200]);
        expect(told).toEqual([`${id}:1:50`]);
        // 2 left is not below 20%; 1 is.
        expect(await statusesOf(t!, headers, 3)).toEqual([200, 200, 200]);
        expect(told).toEqual([`${id}:1:50`, `${id}:1:20`]);
        // Below both, then out: told nothing more (credits.exhausted is its own event).
        expect(await statusesOf(t!, headers, 3)).toEqual([200, 429, 429]);
        expect(told).toEqual([`${id}:1:50`, `${id}:1:20`]);
        await eventually(async () => (await lowEvents(t!, id)).length === 2);
        const common = {
          keyId: record.id,
          quotaId: record.quotaId,
          customerId: null,
          owner: 'key',
          balanceId: id,
          refillAt: null,
          amount: 10,
        };
        expect(await lowEvents(t!, id)).toEqual([
          { dedupeKey: `credits.low:${id}:1:50`, data: { ...common, remaining: 4, threshold: 50 } },
          { dedupeKey: `credits.low:${id}:1:20`, data: { ...common, remaining: 1, threshold: 20 } },
        ]);
      });
    });

    it("one request crossing both thresholds sends both; a customer's balance names its customer; a set sends them again", async () => {
      await withApps(1, { ...store.env(), RATE_LIMIT_COSTS: 'createPet=9' }, async ([t]) => {
        const told = toldLow(t!);
        const customer = await createCustomerRules(t!.db).create(
          { externalId: `cus_low_${store.name}`, limits: null },
          { actor: KEYS_COMMAND },
        );
        const { headers, record } = await knownKey([t!], customer.id);
        const id = await withBalance([t!], { customerId: customer.id }, 10);
        expect((await create(t!, headers)).statusCode).toBe(201);
        expect(told.sort()).toEqual([`${id}:1:20`, `${id}:1:50`]);
        await eventually(async () => (await lowEvents(t!, id)).length === 2);
        const common = {
          keyId: record.id,
          quotaId: record.quotaId,
          customerId: customer.id,
          owner: 'customer',
          balanceId: id,
          refillAt: null,
        };
        expect((await lowEvents(t!, id)).map(({ data }) => data)).toEqual([
          { ...common, remaining: 1, amount: 10, threshold: 50 },
          { ...common, remaining: 1, amount: 10, threshold: 20 },
        ]);

        // A set of 100: version 2, told again as it falls below each threshold of its own base.
        await setAnew([t!], id, 100);
        expect((await create(t!, headers)).statusCode).toBe(201);
        expect(await statusesOf(t!, headers, 40)).toEqual(Array(40).fill(200));
        expect(told.slice(2)).toEqual([]);
        expect(await statusesOf(t!, headers, 2)).toEqual([200, 200]);
        expect(told.slice(2)).toEqual([`${id}:2:50`]);
        await eventually(async () => (await lowEvents(t!, id)).length === 3);
        expect((await lowEvents(t!, id)).find(({ dedupeKey }) => dedupeKey === `credits.low:${id}:2:50`)?.data).toEqual({
          ...common,
          remaining: 49,
          amount: 100,
          threshold: 50,
        });
      });
    });

    it('a balance of 10^15 is told below a threshold one unit under it (past 2^53 once multiplied by 100)', async () => {
      await withApps(1, { ...store.env(), CREDITS_LOW_THRESHOLDS: '99' }, async ([t]) => {
        const { headers, record } = await knownKey([t!]);
        // 99% of 999,999,999,999,999 is 989,999,999,999,999.01: 990,000,000,000,000 left is not below it, one unit less is.
        const id = await insertBalance(t!.db, { quotaId: record.quotaId }, 999_999_999_999_999, { spent: 9_999_999_999_999 });
        expect(await t!.app.keyNotices.catchUp()).toBe(true);
        expect(await statusesOf(t!, headers, 1)).toEqual([200]);
        await eventually(async () => (await lowEvents(t!, id)).length === 1);
        expect((await lowEvents(t!, id))[0]!.data).toMatchObject({ threshold: 99, remaining: 989_999_999_999_999 });
      });
    });

    it('an event whose recording failed is told again by the next request below its threshold, and recorded then', async () => {
      await withApps(1, store.env(), async ([t]) => {
        const told = toldLow(t!);
        const { headers, record } = await knownKey([t!]);
        const id = await withBalance([t!], { quotaId: record.quotaId }, 10);
        const outbox = await refuseLowEvents(t!);
        expect(await statusesOf(t!, headers, 6)).toEqual(Array(6).fill(200));
        const failed = (entry: Record<string, unknown>) =>
          entry.msg === 'webhooks: recording an event failed' && entry.type === 'credits.low';
        await eventually(async () => t!.logs.entries().some(failed));
        await outbox.heal();
        expect(await statusesOf(t!, headers, 1)).toEqual([200]);
        expect(told).toEqual([`${id}:1:50`, `${id}:1:50`]);
        await eventually(async () => (await lowEvents(t!, id)).length === 1);
        expect((await lowEvents(t!, id))[0]!.data).toMatchObject({ threshold: 50, remaining: 3 });
      });
    });
  });
});

/** Makes the outbox refuse credits.low events for real (a trigger raising on their insert), until healed. */
async function refuseLowEvents(t: TestApp) {
  await t.db.query(`CREATE FUNCTION refuse_credits_low() RETURNS trigger LANGUAGE plpgsql AS $$
                    BEGIN RAISE EXCEPTION 'credits.low refused by the test'; END $$`);
  await t.db.query(`CREATE TRIGGER refuse_credits_low BEFORE INSERT ON webhook_deliveries
                    FOR EACH ROW WHEN (NEW.type = 'credits.low') EXECUTE FUNCTION refuse_credits_low()`);
  return { heal: () => t.db.query('DROP TRIGGER refuse_credits_low ON webhook_deliveries') };
}

describe.skipIf(!REDIS_URL)('credits.low while Redis is unreachable (a private Redis server, stopped): decided in the record', () => {
  it('a balance spent in PostgreSQL itself is told low as it falls below each threshold', async () => {
    const redis = await startRedis();
    let running = true;
    try {
      await withApps(1, { REDIS_URL: redis.url, REDIS_KEY_PREFIX: 'credits-low-outage:' }, async ([t]) => {
        const told = toldLow(t!);
        const { headers, record } = await knownKey([t!]);
        const id = await withBalance([t!], { quotaId: record.quotaId }, 10);
        expect(await statusesOf(t!, headers, 2)).toEqual([200, 200]);
        // The record holds the 2 (it follows Redis within a second): the outage spends from it.
        await eventually(async () => (await balanceRecord(t!.db, id)).spent === 2);
        await redis.stop();
        running = false;
        await read(t!, t!.auth);
        await eventually(async () => (await fallbackGauge(t!)) === 1);
        expect(await statusesOf(t!, headers, 9)).toEqual([...Array(8).fill(200), 429]);
        expect(told).toEqual([`${id}:1:50`, `${id}:1:20`]);
        await eventually(async () => (await lowEvents(t!, id)).length === 2);
        expect((await lowEvents(t!, id)).map(({ data }) => [data.threshold, data.remaining])).toEqual([
          [50, 4],
          [20, 1],
        ]);
      });
    } finally {
      if (running) await redis.stop();
    }
  });
});

/** Sends `each` reads of the key at once on every instance, then reads until every instance refuses it for credits. */
async function race(instances: readonly TestApp[], headers: Headers, each: number) {
  await Promise.all(instances.flatMap((t) => Array.from({ length: each }, () => read(t, headers))));
  for (const t of instances) {
    await eventually(async () => (await read(t, headers)).json<{ code?: string }>().code === 'credits_exhausted');
  }
}

const RACES = [
  { name: 'memory stores (each counting its own)', usesRedis: false, env: () => ({}) },
  { name: 'one Redis', usesRedis: true, env: redisStoreEnv },
];

describe.each(RACES)('two instances on one PostgreSQL racing requests across the thresholds, on $name', ({ usesRedis, env }) => {
  it.skipIf(!POSTGRES_URL || (usesRedis && !REDIS_URL))(
    'one event per threshold and version; each instance tells each at most once',
    async ({ annotate }) => {
      await withApps(2, env(), async (instances) => {
        const told = instances.map(toldLow);
        const customer = await createCustomerRules(instances[0]!.db).create(
          { externalId: `cus_low_race_${usesRedis}`, limits: null },
          { actor: KEYS_COMMAND },
        );
        const { headers } = await knownKey(instances, customer.id);
        const id = await withBalance(instances, { customerId: customer.id }, 100);
        await race(instances, headers, 60);
        await setAnew(instances, id, 100);
        await race(instances, headers, 60);
        const expected = [`${id}:1:50`, `${id}:2:50`, `${id}:1:20`, `${id}:2:20`];
        await eventually(async () => (await lowEvents(instances[0]!, id)).length === expected.length);
        expect((await lowEvents(instances[0]!, id)).map(({ dedupeKey }) => dedupeKey)).toEqual(expected.map((key) => `credits.low:${key}`));
        for (const each of told) expect(new Set(each).size).toBe(each.length);
        // Told at least once in all, per threshold and version: by the instance whose request got there first, or by both.
        expect(new Set(told.flat())).toEqual(new Set(expected));
        await annotate(`credits.low told by instance a ${told[0]!.length} times, b ${told[1]!.length}; recorded ${expected.length}`);
      });
    },
  );
});
