// GET /v1/usage: a key reads its own usage record (or its customer's), never another's, and pays nothing for it.
import type { FastifyInstance } from 'fastify';
import { describe } from 'vitest';
import { minuteAndDay } from '../../src/plans/limits.js';
import { insertBalance } from '../support/credit-balances.js';
import { insertCustomer } from '../support/customers.js';
import { describeAppTest, expect } from '../support/fixtures.js';
import { keyInFreshWindows } from '../support/keys.js';
import { RATE_LIMIT_STORES, REDIS_URL } from '../support/redis.js';
import { DAY, MINUTE, T0, type TestClock } from '../support/time.js';

const HOUR = 60 * MINUTE;
const iso = (time: number) => new Date(time).toISOString();
const hourOf = (time: number) => Math.floor(time / HOUR) * HOUR;
const none = { rateLimited: 0, concurrency: 0, credits: 0, banned: 0 };
const LIMITS = minuteAndDay(1_000, 10_000);

/** New keys of the app, known to it; then the clock at 10:00 UTC of a later day whose hours none of them has used. */
async function keysOf(
  app: FastifyInstance,
  clock: TestClock,
  settings: Array<Parameters<FastifyInstance['apiKeysRepository']['create']>[0]>,
) {
  const keys = [];
  // A first key's quota is its own id.
  for (const setting of settings) {
    const { headers, quotaId } = await keyInFreshWindows(app, clock, setting);
    keys.push({ headers, keyId: quotaId, quotaId });
  }
  clock.set((Math.floor(clock.now() / DAY) + 1) * DAY + 10 * HOUR);
  return keys;
}

/** GET /v1/usage as the key `headers` is, once the app has written what it counted. */
async function usageOf(app: FastifyInstance, headers: { authorization: string }, query: string) {
  await app.usage.flush();
  return app.inject({ url: `/v1/usage?${query}`, headers });
}

async function rowsOf(app: FastifyInstance, headers: { authorization: string }, query: string) {
  const answer = await usageOf(app, headers, query);
  expect(answer.statusCode, answer.body).toBe(200);
  return answer.json();
}

const list = async (app: FastifyInstance, headers: { authorization: string }, times = 1) => {
  for (let i = 0; i < times; i++) expect((await app.inject({ url: '/v1/pets?limit=1', headers })).statusCode).toBe(200);
};

describe('GET /v1/usage shows the calling key its own rows, and its customer its own totals', () => {
  const test = describeAppTest({ clock: T0, env: { RATE_LIMIT_COSTS: 'createPet=3', USAGE_RETENTION_DAYS: '30' } });

  test("a key's own rows, by hour or day or operation; its customer's keys together with scope=customer; nothing of another key or customer", async ({
    t,
    clock,
  }) => {
    const customerA = await insertCustomer(t.app.db, 'cus_v1_usage_a');
    const customerB = await insertCustomer(t.app.db, 'cus_v1_usage_b');
    const [a1, a2, b1, solo] = await keysOf(t.app, clock, [
      { plan: 'enterprise', limits: LIMITS, customerId: customerA },
      { plan: 'enterprise', limits: LIMITS, customerId: customerA },
      { plan: 'enterprise', limits: LIMITS, customerId: customerB },
      { plan: 'enterprise', limits: LIMITS },
    ]);
    const hour = hourOf(clock.now());
    // In the same hours: a1 lists twice and creates (3 units); a2 lists; b1 lists three times; the key of no customer lists.
    await list(t.app, a1!.headers, 2);
    const created = await t.app.inject({ method: 'POST', url: '/v1/pets', headers: a1!.headers, payload: { name: 'Mine', categoryId: 1 } });
    expect(created.statusCode).toBe(201);
    await list(t.app, a2!.headers);
    await list(t.app, b1!.headers, 3);
    await list(t.app, solo!.headers);
    clock.advance(HOUR);
    await list(t.app, a1!.headers);
    await list(t.app, b1!.headers);
    // Read in the hour after: the reads themselves fall outside the range.
    clock.advance(HOUR);
    const range = `start=${iso(hour)}&end=${iso(hour + 2 * HOUR)}`;

    expect(await rowsOf(t.app, a1!.headers, range)).toEqual([
      { start: iso(hour), requests: 3, units: 5, refused: none },
      { start: iso(hour + HOUR), requests: 1, units: 1, refused: none },
    ]);
    expect(await rowsOf(t.app, a1!.headers, `${range}&groupBy=operation&scope=key`)).toEqual([
      { start: iso(hour), operation: 'createPet', requests: 1, units: 3, refused: none },
      { start: iso(hour), operation: 'listPets', requests: 2, units: 2, refused: none },
      { start: iso(hour + HOUR), operation: 'listPets', requests: 1, units: 1, refused: none },
    ]);
    const day = Math.floor(hour / DAY) * DAY;
    expect(await rowsOf(t.app, a1!.headers, `start=${iso(day)}&end=${iso(day + DAY)}&granularity=day`)).toEqual([
      // The day's: its reads of the hour after count too, as requests of no units.
      { start: iso(day), requests: 6, units: 6, refused: none },
    ]);
    expect(await rowsOf(t.app, a2!.headers, range)).toEqual([{ start: iso(hour), requests: 1, units: 1, refused: none }]);
    expect(await rowsOf(t.app, b1!.headers, range)).toEqual([
      { start: iso(hour), requests: 3, units: 3, refused: none },
      { start: iso(hour + HOUR), requests: 1, units: 1, refused: none },
    ]);

    // The customer's: its keys' together, and of no other customer's key.
    const customerTotals = [
      { start: iso(hour), requests: 4, units: 6, refused: none },
      { start: iso(hour + HOUR), requests: 1, units: 1, refused: none },
    ];
    expect(await rowsOf(t.app, a1!.headers, `${range}&scope=customer`)).toEqual(customerTotals);
    expect(await rowsOf(t.app, a2!.headers, `${range}&scope=customer`)).toEqual(customerTotals);
    expect(await rowsOf(t.app, b1!.headers, `${range}&scope=customer`)).toEqual(await rowsOf(t.app, b1!.headers, range));

    // No parameter names another key or customer: one given is ignored, and the caller's own rows come back.
    expect(await rowsOf(t.app, a2!.headers, `${range}&keyId=${b1!.keyId}&customerId=${customerB}`)).toEqual([
      { start: iso(hour), requests: 1, units: 1, refused: none },
    ]);
    // A key of no customer has no customer's totals to read.
    const orphan = await usageOf(t.app, solo!.headers, `${range}&scope=customer`);
    expect(orphan.statusCode).toBe(400);
    expect(orphan.json()).toEqual({
      code: 'bad_request',
      message: 'querystring/scope=customer: this API key belongs to no customer; ask scope=key',
      status: 400,
    });
    expect(await rowsOf(t.app, solo!.headers, range)).toEqual([{ start: iso(hour), requests: 1, units: 1, refused: none }]);
  });

  test('pages of `limit` rows linked by rel="next"; the cursor is bound to its query', async ({ t, clock }) => {
    const [key] = await keysOf(t.app, clock, [{ plan: 'enterprise', limits: LIMITS }]);
    const hour = hourOf(clock.now());
    for (let i = 0; i < 3; i++) {
      await list(t.app, key!.headers);
      clock.advance(HOUR);
    }
    const range = `start=${iso(hour)}&end=${iso(hour + 3 * HOUR)}`;
    const first = await usageOf(t.app, key!.headers, `${range}&limit=2`);
    expect(first.statusCode).toBe(200);
    expect(first.json().map((row: { start: string }) => row.start)).toEqual([iso(hour), iso(hour + HOUR)]);
    const next = new URL(/^<([^>]+)>; rel="next"$/.exec(String(first.headers.link))![1]!);
    expect(`${next.origin}${next.pathname}`).toBe('https://api.example.test/v1/usage');
    expect(Object.fromEntries(next.searchParams)).toEqual({
      start: iso(hour),
      end: iso(hour + 3 * HOUR),
      limit: '2',
      cursor: expect.any(String),
    });
    const second = await usageOf(t.app, key!.headers, next.search.slice(1));
    expect(second.statusCode).toBe(200);
    expect(second.json()).toEqual([{ start: iso(hour + 2 * HOUR), requests: 1, units: 1, refused: none }]);
    expect(second.headers.link).toBeUndefined();

    // A cursor moved off its bucket is none of ours: read from there, a bucket would come back cut, or twice.
    const [digest, after] = Buffer.from(next.searchParams.get('cursor')!, 'base64url').toString().split(':');
    const offBucket = Buffer.from(`${digest}:${Number(after) + MINUTE}:`).toString('base64url');
    expect((await usageOf(t.app, key!.headers, `${range}&limit=2&cursor=${offBucket}`)).json()).toEqual({
      code: 'bad_request',
      message: 'querystring/cursor is not a cursor from a rel="next" link',
      status: 400,
    });

    const elsewhere = await usageOf(t.app, key!.headers, `${range}&scope=customer&cursor=${next.searchParams.get('cursor')}`);
    expect(elsewhere.statusCode).toBe(400);
    const moved = await usageOf(t.app, key!.headers, `${range}&groupBy=operation&cursor=${next.searchParams.get('cursor')}`);
    expect(moved.json()).toEqual({
      code: 'bad_request',
      message: 'querystring/cursor was made for another query; keep the scope, granularity, start, end and groupBy of the first page',
      status: 400,
    });
  });

  test('a bad range, scope, granularity or page is a 400 with the Error shape, naming the parameter', async ({ t, clock }) => {
    const [key] = await keysOf(t.app, clock, [{ plan: 'enterprise', limits: LIMITS }]);
    const hour = iso(hourOf(clock.now()));
    const later = iso(hourOf(clock.now()) + HOUR);
    const cases: Array<[string, string]> = [
      [`end=${later}`, 'querystring/start is required'],
      [`start=${hour}`, 'querystring/end is required'],
      [`start=yesterday&end=${later}`, 'querystring/start must be an ISO 8601 date-time'],
      [`start=2026-02-30T00:00:00Z&end=${later}`, 'querystring/start is no date and time on the calendar'],
      [`start=${iso(hourOf(clock.now()) + MINUTE)}&end=${later}`, 'querystring/start must be a whole hour (UTC)'],
      [`start=${hour}&end=${later}&granularity=day`, 'querystring/start must be 00:00 UTC of a day, with granularity=day'],
      // Instants of no year from 0001 to 9999 in UTC: the embedded database takes none of them (it answered a 500).
      [`start=0000-01-01T00:00:00Z&end=0000-01-01T01:00:00Z`, 'querystring/start must lie in the years 0001 to 9999 (UTC)'],
      [`start=9999-12-31T23:00:00Z&end=9999-12-31T23:00:00-01:00`, 'querystring/end must lie in the years 0001 to 9999 (UTC)'],
      [`start=${later}&end=${hour}`, 'querystring/start must be before end'],
      [`start=${hour}&end=${hour}`, 'querystring/start must be before end'],
      [`start=2025-01-01T00:00:00Z&end=2026-01-03T00:00:00Z`, 'querystring/end: the range from start to end is more than 366 days'],
      [`start=${hour}&end=${later}&granularity=week`, 'querystring/granularity'],
      [`start=${hour}&end=${later}&scope=everyone`, 'querystring/scope'],
      [`start=${hour}&end=${later}&groupBy=key`, 'querystring/groupBy'],
      [`start=${hour}&end=${later}&limit=0`, 'querystring/limit must be an integer from 1 to 5000'],
      [`start=${hour}&end=${later}&cursor=nonsense`, 'querystring/cursor is not a cursor from a rel="next" link'],
    ];
    for (const [query, message] of cases) {
      const answer = await t.app.inject({ url: `/v1/usage?${query}`, headers: key!.headers });
      expect(answer.statusCode, query).toBe(400);
      expect(answer.json(), query).toEqual({ code: 'bad_request', message: expect.stringContaining(message), status: 400 });
    }
  });
});

describe.each(RATE_LIMIT_STORES)('GET /v1/usage costs nothing, with the $name store', (store) => {
  const test = describeAppTest({
    clock: T0,
    envAtBuild: () => ({ ...store.env(), RATE_LIMIT_BAN_THRESHOLD: '2', USAGE_RETENTION_DAYS: '30' }),
  });

  describe.skipIf(store.usesRedis && !REDIS_URL)('', () => {
    test("spends nothing of the key's windows, credits or concurrency; the record counts each read as a request of 0 units", async ({
      t,
      clock,
    }) => {
      const [key] = await keysOf(t.app, clock, [{ plan: 'enterprise', limits: minuteAndDay(3, 1_000) }]);
      await insertBalance(t.app.db, { quotaId: key!.quotaId }, 100);
      expect(await t.app.keyNotices.catchUp()).toBe(true);
      const hour = hourOf(clock.now());
      const range = `start=${iso(hour)}&end=${iso(hour + HOUR)}&groupBy=operation`;
      const standing = async () => (await t.app.inject({ url: '/v1/rate_limit', headers: key!.headers })).json();

      await list(t.app, key!.headers);
      const before = await standing();
      expect(before).toMatchObject({ minute: { remaining: 2, used: 1 }, credits: { remaining: 99 }, concurrency: { inFlight: 0 } });
      for (let i = 0; i < 5; i++) {
        const read = await usageOf(t.app, key!.headers, range);
        expect(read.statusCode).toBe(200);
        expect(read.headers['x-ratelimit-remaining']).toBe('2');
      }
      expect(await standing()).toEqual(before);

      // Its window spent, the key still reads its usage; the reads so far, each a request of no units, the sixth not yet answered.
      await list(t.app, key!.headers, 2);
      expect((await t.app.inject({ url: '/v1/pets?limit=1', headers: key!.headers })).statusCode).toBe(429);
      expect(await rowsOf(t.app, key!.headers, range)).toEqual([
        { start: iso(hour), operation: 'getRateLimit', requests: 2, units: 0, refused: none },
        { start: iso(hour), operation: 'getUsage', requests: 5, units: 0, refused: none },
        { start: iso(hour), operation: 'listPets', requests: 3, units: 3, refused: { ...none, rateLimited: 1 } },
      ]);
      expect((await standing()).credits).toEqual({ remaining: 97, refillAt: null });
    });

    test('has a limit of its own, 60 a minute per key, apart from the quota lookup and banning no one', async ({ t, clock }) => {
      const [key] = await keysOf(t.app, clock, [{ plan: 'enterprise', limits: LIMITS }]);
      clock.advance(30_000);
      const range = `start=${iso(hourOf(clock.now()))}&end=${iso(hourOf(clock.now()) + HOUR)}`;
      const read = () => t.app.inject({ url: `/v1/usage?${range}`, headers: key!.headers });
      // A query refused as bad spends nothing of the limit.
      for (let i = 0; i < 5; i++)
        expect((await t.app.inject({ url: `/v1/usage?${range}&scope=customer`, headers: key!.headers })).statusCode).toBe(400);
      for (let i = 0; i < 60; i++) expect((await read()).statusCode).toBe(200);
      // Refused well past the ban threshold of 2: still no ban.
      for (let i = 0; i < 5; i++) {
        const refused = await read();
        expect(refused.statusCode).toBe(429);
        expect(refused.json()).toEqual({
          code: 'rate_limited',
          message: 'GET /v1/usage answers 60 times a minute per API key; retry after the Retry-After delay',
          status: 429,
        });
        expect(refused.headers['retry-after']).toBe('30');
      }
      expect((await t.app.inject({ url: '/v1/rate_limit', headers: key!.headers })).statusCode).toBe(200);
      await list(t.app, key!.headers);
      clock.advance(MINUTE);
      expect((await read()).statusCode).toBe(200);
    });
  });
});
