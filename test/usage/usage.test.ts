import type { FastifyInstance } from 'fastify';
import { describe } from 'vitest';
import type { ApiKeyIdentity } from '../../src/api-keys/identity.js';
import { loadConfig } from '../../src/config/load.js';
import { CSV_TYPE } from '../../src/usage/admin-routes.js';
import { adminFixture, type TestAdmin } from '../support/admin.js';
import { buildTestApp } from '../support/app.js';
import { insertBalance } from '../support/credit-balances.js';
import { eventually } from '../support/eventually.js';
import { appTest, expect } from '../support/fixtures.js';
import { portOf } from '../support/http.js';
import { bearer, keyInFreshWindows } from '../support/keys.js';
import { openSocket } from '../support/raw-socket.js';
import { DAY, MINUTE, T0, testClock, type TestClock } from '../support/time.js';
import { csvOf, type UsageRow } from '../support/usage-csv.js';
import { minuteAndDay } from '../../src/plans/limits.js';

const HOUR = 60 * MINUTE;

/**
 * One app for the file on the test's clock: createPet costs 3 units, a key is banned after 2
 * refusals in a minute.
 */
const test = appTest({
  clock: T0,
  env: { RATE_LIMIT_COSTS: 'createPet=3', RATE_LIMIT_BAN_THRESHOLD: '2', USAGE_RETENTION_DAYS: '30' },
}).extend('admin', { scope: 'file' }, adminFixture);

/** GET /admin/v1/usage with the read token: the status, and the body as JSON or as text (Accept given). */
async function usageOf(admin: TestAdmin, query: string, accept?: string) {
  const response = await admin.server.inject({
    url: `/admin/v1/usage?${query}`,
    headers: { ...bearer(admin.read.token), ...(accept && { accept }) },
  });
  return { status: response.statusCode, type: response.headers['content-type'], text: response.body, json: () => response.json() };
}

/** The rows of the query, once this instance has written what it counted. */
async function rowsOf(app: FastifyInstance, admin: TestAdmin, query: string) {
  await app.usage.flush();
  const answer = await usageOf(admin, query);
  expect(answer.status, answer.text).toBe(200);
  return answer.json() as Array<Record<string, unknown>>;
}

const refused = (counts: Partial<Record<'rateLimited' | 'concurrency' | 'credits' | 'banned', number>> = {}) => ({
  rateLimited: 0,
  concurrency: 0,
  credits: 0,
  banned: 0,
  ...counts,
});

/** A customer of the app's database, as the admin API makes one; its id. */
const newCustomer = async (app: FastifyInstance, externalId: string) =>
  (await app.db.query<{ id: number }>('INSERT INTO customers (external_id) VALUES ($1) RETURNING id', [externalId]))[0]!.id;

/** A day of its own for each test, from 10:00 UTC: the hours it reads hold only what it sent. */
const dayOf = (n: number) => T0 + n * 7 * DAY;
const iso = (time: number) => new Date(time).toISOString();

describe('the usage record counts every decision on a request with a valid key', () => {
  test('served requests and the units they spent, per operation; refusals by kind; nothing of requests without a valid key', async ({
    t,
    clock,
    admin,
  }) => {
    const customerId = await newCustomer(t.app, 'cus_usage');
    const { headers, keyId } = await freshKey(t.app, clock, { plan: 'enterprise', limits: minuteAndDay(6, 1_000), customerId }, dayOf(1));
    const start = clock.now();
    const hour = Math.floor(start / HOUR) * HOUR;

    // Served: two lists (1 unit each), a create (3), a free revalidation (0), the quota lookup (cost 0), an unknown path (1).
    const list = await t.app.inject({ url: '/v1/pets?limit=1', headers });
    expect(list.statusCode).toBe(200);
    expect((await t.app.inject({ url: '/v1/pets?limit=1', headers: { ...headers, 'if-none-match': list.headers.etag } })).statusCode).toBe(
      304,
    );
    expect((await t.app.inject({ url: '/v1/pets?limit=2', headers })).statusCode).toBe(200);
    const created = await t.app.inject({ method: 'POST', url: '/v1/pets', headers, payload: { name: 'Counted', categoryId: 1 } });
    expect(created.statusCode).toBe(201);
    expect((await t.app.inject({ url: '/v1/rate_limit', headers })).statusCode).toBe(200);
    expect((await t.app.inject({ url: '/v1/nowhere', headers })).statusCode).toBe(404);
    // 6 units spent: two refusals (rate limited), then the ban's (after 2 refusals).
    for (const status of [429, 429, 429]) expect((await t.app.inject({ url: '/v1/pets?limit=1', headers })).statusCode).toBe(status);
    // Without a valid key: nothing.
    expect((await t.app.inject({ url: '/v1/pets?limit=1', headers: bearer('psk_nonsense') })).statusCode).toBe(401);
    expect((await t.app.inject({ url: '/v1/pets?limit=1' })).statusCode).toBe(401);

    const query = `keyId=${keyId}&start=${iso(hour)}&end=${iso(hour + HOUR)}`;
    expect(await rowsOf(t.app, admin, `${query}&groupBy=operation`)).toEqual([
      { start: iso(hour), operation: null, requests: 1, units: 1, refused: refused() },
      { start: iso(hour), operation: 'createPet', requests: 1, units: 3, refused: refused() },
      { start: iso(hour), operation: 'getRateLimit', requests: 1, units: 0, refused: refused() },
      { start: iso(hour), operation: 'listPets', requests: 3, units: 2, refused: refused({ rateLimited: 2, banned: 1 }) },
    ]);
    const total = { start: iso(hour), requests: 6, units: 6, refused: refused({ rateLimited: 2, banned: 1 }) };
    expect(await rowsOf(t.app, admin, query)).toEqual([total]);
    // The customer's usage is its keys' together.
    expect(await rowsOf(t.app, admin, `customerId=${customerId}&start=${iso(hour)}&end=${iso(hour + HOUR)}`)).toEqual([total]);
    expect(await rowsOf(t.app, admin, `customerId=${customerId}&start=${iso(hour)}&end=${iso(hour + HOUR)}&groupBy=key`)).toEqual([
      { ...total, keyId },
    ]);
  });

  test('a shadow-mode key past its limits is served and counted so; an operation dearer than a window, and a request over the concurrency limit, are refused as such', async ({
    t,
    clock,
    admin,
  }) => {
    const shadow = await freshKey(t.app, clock, { plan: 'enterprise', limits: minuteAndDay(1, 1_000), enforceLimits: false }, dayOf(2));
    for (let i = 0; i < 3; i++) expect((await t.app.inject({ url: '/v1/pets?limit=1', headers: shadow.headers })).statusCode).toBe(200);
    const hour = Math.floor(clock.now() / HOUR) * HOUR;
    const range = `start=${iso(hour)}&end=${iso(hour + HOUR)}`;
    expect(await rowsOf(t.app, admin, `keyId=${shadow.keyId}&${range}`)).toEqual([
      { start: iso(hour), requests: 3, units: 3, refused: refused() },
    ]);

    // Limits stored below createPet's 3 units (as before RATE_LIMIT_COSTS rose): its 403 cost_exceeds_limit counts as rate limited.
    const cheap = await freshKey(t.app, clock, { plan: 'enterprise', limits: minuteAndDay(2, 1_000) }, dayOf(2));
    const refusal = await t.app.inject({
      method: 'POST',
      url: '/v1/pets',
      headers: cheap.headers,
      payload: { name: 'Dear', categoryId: 1 },
    });
    expect(refusal.json()).toMatchObject({ code: 'cost_exceeds_limit' });
    const cheapHour = Math.floor(clock.now() / HOUR) * HOUR;
    expect(await rowsOf(t.app, admin, `keyId=${cheap.keyId}&start=${iso(cheapHour)}&end=${iso(cheapHour + HOUR)}`)).toEqual([
      { start: iso(cheapHour), requests: 0, units: 0, refused: refused({ rateLimited: 1 }) },
    ]);

    // One request in flight (its body not sent) holds the key's one slot: the next is refused.
    const single = await freshKey(t.app, clock, { plan: 'business', concurrency: 1 }, dayOf(2));
    const held = await openSocket(await portOf(t.app));
    held.socket.write(
      `POST /v1/pets HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: ${single.headers.authorization}\r\n` +
        'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"name":',
    );
    await eventually(async () => (await t.app.rateLimit.inFlight({ quotaId: single.quotaId, customerId: null }, clock.now())) === 1);
    expect((await t.app.inject({ url: '/v1/pets?limit=1', headers: single.headers })).statusCode).toBe(429);
    // The rest of its body: it is served, and spent its operation's cost.
    held.socket.write('"Held","categoryId":1}'.padEnd(100 - '{"name":'.length));
    await eventually(async () => held.received.startsWith('HTTP/1.1 201'));
    held.socket.destroy();
    const now = Math.floor(clock.now() / HOUR) * HOUR;
    expect(await rowsOf(t.app, admin, `keyId=${single.keyId}&start=${iso(now)}&end=${iso(now + HOUR)}&groupBy=operation`)).toEqual([
      { start: iso(now), operation: 'createPet', requests: 1, units: 3, refused: refused() },
      { start: iso(now), operation: 'listPets', requests: 0, units: 0, refused: refused({ concurrency: 1 }) },
    ]);
  });
});

/** A new key (repository settings) in windows of its own, with the clock then at 10 minutes into `day`'s day or the next. */
async function freshKey(
  app: FastifyInstance,
  clock: TestClock,
  settings: Parameters<FastifyInstance['apiKeysRepository']['create']>[0],
  day: number,
) {
  if (clock.now() < day) clock.set(day);
  const { headers, quotaId } = await keyInFreshWindows(app, clock, settings);
  // A first key's quota is its own id. The probes that waited for it were counted days before: the test's hours hold none.
  return { headers, quotaId, keyId: quotaId };
}

describe('the refusals the limiter names by code', () => {
  test('a request refused for its credits counts as credits, spending nothing; an error of another code is no refusal', async ({
    t,
    clock,
    admin,
  }) => {
    const { headers, quotaId, keyId } = await freshKey(t.app, clock, { plan: 'enterprise', limits: minuteAndDay(1_000, 10_000) }, dayOf(4));
    // A balance of 4 units: createPet's 3 and a listPets's 1, then each request is refused for its credits.
    await insertBalance(t.app.db, { quotaId }, 4);
    expect(await t.app.keyNotices.catchUp()).toBe(true);
    const pet = { name: 'Prepaid', categoryId: 1 };
    expect((await t.app.inject({ method: 'POST', url: '/v1/pets', headers, payload: pet })).statusCode).toBe(201);
    const statuses = [];
    for (let i = 0; i < 3; i++) statuses.push((await t.app.inject({ url: '/v1/pets?limit=1', headers })).statusCode);
    expect(statuses).toEqual([200, 429, 429]);
    // As the pipeline tells the record of a refusal of admit, with an error of no refusal's code.
    t.app.usage.refused({ id: keyId, customerId: null } as ApiKeyIdentity, 'listPets', new Error('the store failed'));
    const hour = Math.floor(clock.now() / HOUR) * HOUR;
    expect(await rowsOf(t.app, admin, `keyId=${keyId}&start=${iso(hour)}&end=${iso(hour + HOUR)}&groupBy=operation`)).toEqual([
      { start: iso(hour), operation: 'createPet', requests: 1, units: 3, refused: refused() },
      { start: iso(hour), operation: 'listPets', requests: 1, units: 1, refused: refused({ credits: 2 }) },
    ]);
  });
});

describe('GET /admin/v1/usage', () => {
  test('hours or UTC days, grouped by key or operation, without the buckets that had no usage; CSV the same rows as JSON', async ({
    t,
    clock,
    admin,
  }) => {
    const customerId = await newCustomer(t.app, 'cus_buckets');
    const a = await freshKey(t.app, clock, { plan: 'enterprise', limits: minuteAndDay(1_000, 10_000), customerId }, dayOf(3));
    const b = await freshKey(t.app, clock, { plan: 'enterprise', limits: minuteAndDay(1_000, 10_000), customerId }, dayOf(3));
    const day = Math.floor(clock.now() / DAY) * DAY;
    const send = async (at: number, headers: { authorization: string }, count: number, create = false) => {
      clock.set(at);
      for (let i = 0; i < count; i++) {
        const response = create
          ? await t.app.inject({ method: 'POST', url: '/v1/pets', headers, payload: { name: 'Bucketed', categoryId: 1 } })
          : await t.app.inject({ url: `/v1/pets?limit=${i + 1}`, headers });
        expect(response.statusCode).toBeLessThan(300);
      }
    };
    // Hours 10 and 12 of the day (none in 11), and 01 of the next day.
    await send(day + 10 * HOUR + MINUTE, a.headers, 2);
    await send(day + 10 * HOUR + 2 * MINUTE, b.headers, 1, true);
    await send(day + 12 * HOUR + MINUTE, a.headers, 1, true);
    await send(day + 25 * HOUR + MINUTE, b.headers, 3);
    // Flushes asked at once write each count once.
    await Promise.all([t.app.usage.flush(), t.app.usage.flush(), t.app.usage.flush()]);

    const counts = (requests: number, units: number) => ({ requests, units, refused: refused() });
    const range = `customerId=${customerId}&start=${iso(day)}&end=${iso(day + 2 * DAY)}`;
    const cases: Array<[string, unknown[]]> = [
      [
        `${range}&granularity=hour`,
        [
          { start: iso(day + 10 * HOUR), ...counts(3, 5) },
          { start: iso(day + 12 * HOUR), ...counts(1, 3) },
          { start: iso(day + 25 * HOUR), ...counts(3, 3) },
        ],
      ],
      [
        `${range}&granularity=day`,
        [
          { start: iso(day), ...counts(4, 8) },
          { start: iso(day + DAY), ...counts(3, 3) },
        ],
      ],
      [
        `${range}&granularity=day&groupBy=key`,
        [
          { start: iso(day), keyId: a.keyId, ...counts(3, 5) },
          { start: iso(day), keyId: b.keyId, ...counts(1, 3) },
          { start: iso(day + DAY), keyId: b.keyId, ...counts(3, 3) },
        ],
      ],
      [
        `${range}&groupBy=operation`,
        [
          { start: iso(day + 10 * HOUR), operation: 'createPet', ...counts(1, 3) },
          { start: iso(day + 10 * HOUR), operation: 'listPets', ...counts(2, 2) },
          { start: iso(day + 12 * HOUR), operation: 'createPet', ...counts(1, 3) },
          { start: iso(day + 25 * HOUR), operation: 'listPets', ...counts(3, 3) },
        ],
      ],
      [`keyId=${a.keyId}&start=${iso(day + 11 * HOUR)}&end=${iso(day + 13 * HOUR)}`, [{ start: iso(day + 12 * HOUR), ...counts(1, 3) }]],
    ];
    for (const [query, rows] of cases) {
      const json = await usageOf(admin, query, 'application/json');
      expect(json.status).toBe(200);
      expect(json.json(), query).toEqual(rows);
      const csv = await usageOf(admin, query, 'text/csv');
      expect(csv.status).toBe(200);
      expect(csv.type).toBe(CSV_TYPE);
      expect(csv.text, query).toBe(csvOf(rows as UsageRow[]));
    }
    // JSON without an Accept, or when it prefers JSON; CSV when it prefers CSV.
    expect((await usageOf(admin, range)).type).toMatch(/^application\/json/);
    expect((await usageOf(admin, range, 'application/json, text/csv;q=0.5')).type).toMatch(/^application\/json/);
    expect((await usageOf(admin, range, 'text/csv, application/json;q=0.9')).type).toBe(CSV_TYPE);
    // The most specific range sets a type's quality: a wildcard does not undo text/csv;q=0. Parameters of text/csv matching ours are CSV.
    expect((await usageOf(admin, range, 'text/csv;q=0, */*')).type).toMatch(/^application\/json/);
    expect((await usageOf(admin, range, 'text/csv; charset=utf-8')).type).toBe(CSV_TYPE);
  });

  test('a 400 naming the field for bad input: no owner or both, an unknown one, bounds off the buckets, start not before end, too long a range', async ({
    t,
    admin,
  }) => {
    const range = 'start=2026-11-01T00:00:00Z&end=2026-11-02T00:00:00Z';
    const keyId = (await t.app.db.query<{ id: number }>('SELECT min(id)::int AS id FROM api_keys'))[0]!.id;
    const refusals: Array<[string, string]> = [
      [range, 'querystring/customerId or keyId is required'],
      [`customerId=1&keyId=${keyId}&${range}`, 'querystring/keyId goes without customerId'],
      [`customerId=999999&${range}`, 'querystring/customerId names no customer'],
      [`keyId=999999&${range}`, 'querystring/keyId names no key'],
      [`keyId=0&${range}`, 'querystring/keyId'],
      [`keyId=${keyId}&start=yesterday&end=2026-11-02T00:00:00Z`, 'querystring/start must be an ISO 8601 date-time'],
      [`keyId=${keyId}&start=2026-02-30T00:00:00Z&end=2026-11-02T00:00:00Z`, 'querystring/start is no date and time on the calendar'],
      [`keyId=${keyId}&start=2026-11-01T00:30:00Z&end=2026-11-02T00:00:00Z`, 'querystring/start must be a whole hour'],
      [`keyId=${keyId}&start=0000-12-31T00:00:00Z&end=0001-01-01T00:00:00Z`, 'querystring/start must lie in the years 0001 to 9999 (UTC)'],
      [`keyId=${keyId}&${range.replace('02T00', '02T05')}&granularity=day`, 'querystring/end must be 00:00 UTC of a day'],
      [`keyId=${keyId}&start=2026-11-02T00:00:00Z&end=2026-11-01T00:00:00Z`, 'querystring/start must be before end'],
      [`keyId=${keyId}&start=2026-11-01T00:00:00Z&end=2026-11-01T00:00:00Z`, 'querystring/start must be before end'],
      [
        `keyId=${keyId}&start=2025-01-01T00:00:00Z&end=2026-01-02T01:00:00Z`,
        'querystring/end: the range from start to end is more than 366 days',
      ],
      [`keyId=${keyId}&start=2000-01-01T00:00:00Z&end=2011-01-01T00:00:00Z&granularity=day`, 'more than 3660 days'],
      [`keyId=${keyId}&${range}&granularity=minute`, 'querystring/granularity must be one of hour, day'],
      [`keyId=${keyId}&${range}&groupBy=plan`, 'querystring/groupBy must be one of key, operation'],
    ];
    for (const [query, message] of refusals) {
      const answer = await usageOf(admin, query);
      expect({ query, status: answer.status }).toEqual({ query, status: 400 });
      expect(answer.json()).toEqual({ code: 'bad_request', status: 400, message: expect.stringContaining(message) });
    }
    // A range of exactly 366 days of hours (a leap year's) is answered; so is one from a start given in another time zone.
    expect((await usageOf(admin, `keyId=${keyId}&start=2024-01-01T00:00:00Z&end=2025-01-01T00:00:00Z`)).status).toBe(200);
    expect((await usageOf(admin, `keyId=${keyId}&start=2026-11-01T02:00:00%2B02:00&end=2026-11-01T01:00:00Z`)).status).toBe(200);
  });
});

describe('what the record keeps', () => {
  test('a write that fails keeps its counts for the next one; hours past USAGE_RETENTION_DAYS are deleted, in batches', async ({
    t,
    clock,
    admin,
  }) => {
    const key = await freshKey(t.app, clock, { plan: 'enterprise', limits: minuteAndDay(1_000, 10_000) }, dayOf(5));
    const hour = Math.floor(clock.now() / HOUR) * HOUR;
    await t.app.db.query('ALTER TABLE usage_hours RENAME TO usage_hours_away');
    for (let i = 0; i < 2; i++) expect((await t.app.inject({ url: '/v1/pets?limit=1', headers: key.headers })).statusCode).toBe(200);
    await t.app.usage.flush();
    expect(t.logs.entries().filter((entry) => String(entry.msg).startsWith('usage: writing the usage record failed'))).not.toEqual([]);
    await t.app.db.query('ALTER TABLE usage_hours_away RENAME TO usage_hours');
    expect((await t.app.inject({ url: '/v1/pets?limit=1', headers: key.headers })).statusCode).toBe(200);
    const range = `keyId=${key.keyId}&start=${iso(hour)}&end=${iso(hour + HOUR)}`;
    expect(await rowsOf(t.app, admin, range)).toEqual([{ start: iso(hour), requests: 3, units: 3, refused: refused() }]);

    // 2,500 hours (past a prune's batch of 1,000) before the 30 days of retention, and one within them; and what the
    // export sent (usage.hourly) of 3,500 such hours, more than the record holds (as after a record pruned by hand), which
    // are deleted all the same. The clock moved days with freshKey, so a prune may run at any moment from here: the
    // inserts count their own rows rather than read them back after.
    const now = clock.now();
    const added = async (text: string, values: unknown[]) =>
      (await t.app.db.query<{ count: number }>(`WITH added AS (${text} RETURNING 1) SELECT count(*)::int AS count FROM added`, values))[0]!
        .count;
    const hours = (old: number) => `SELECT $1::timestamptz - make_interval(hours => i) AS hour FROM generate_series(1, ${old}) AS i
                                    UNION ALL SELECT $2::timestamptz`;
    const values = [iso(hour - 31 * DAY), iso(hour - 29 * DAY), key.keyId];
    expect(
      await added(
        `INSERT INTO usage_hours (hour, key_id, operation, requests) SELECT hour, $3, 'listPets', 1 FROM (${hours(2_500)}) AS h`,
        values,
      ),
    ).toBe(2_501);
    expect(
      await added(
        `INSERT INTO usage_exports (hour, subject, operation, key_id, revision, requests, units, refused_rate_limited,
                                    refused_concurrency, refused_credits, refused_banned)
         SELECT hour, 'key:' || $3::int, 'listPets', $3::int, 1, 1, 1, 0, 0, 0, 0 FROM (${hours(3_500)}) AS h`,
        values,
      ),
    ).toBe(3_501);
    const before = async (table: 'usage_hours' | 'usage_exports') =>
      (
        await t.app.db.query<{ hour: Date }>(`SELECT hour FROM ${table} WHERE key_id = $1 AND hour < $2 ORDER BY hour`, [
          key.keyId,
          iso(now - DAY),
        ])
      ).map((row) => new Date(row.hour).getTime());
    // The next prune comes a minute later on the app's clock.
    clock.advance(2 * MINUTE);
    await eventually(async () => (await before('usage_hours')).length === 1 && (await before('usage_exports')).length === 1, 10_000);
    expect(await before('usage_hours')).toEqual([hour - 29 * DAY]);
    expect(await before('usage_exports')).toEqual([hour - 29 * DAY]);
  });

  test('USAGE_RETENTION_DAYS: 400 days by default; 0 keeps no record at all, counting nothing and deleting the hours recorded before', async () => {
    expect(loadConfig({}).USAGE_RETENTION_DAYS).toBe(400);
    expect(() => loadConfig({ USAGE_RETENTION_DAYS: '-1' })).toThrow('USAGE_RETENTION_DAYS');
    // The app's clock, moved past a minute below: the next prune comes then.
    const clock = testClock(Date.now());
    const none = await buildTestApp({ USAGE_RETENTION_DAYS: '0' }, { now: clock.now });
    try {
      const keyId = (await none.db.query<{ id: number }>('SELECT min(id)::int AS id FROM api_keys'))[0]!.id;
      const hour = Math.floor(clock.now() / HOUR) * HOUR;
      await none.db.query(`INSERT INTO usage_hours (hour, key_id, operation, requests) VALUES ($1, $2, 'listPets', 1)`, [
        iso(hour - 2 * HOUR),
        keyId,
      ]);
      expect((await none.app.inject({ url: '/v1/pets?limit=1', headers: none.auth })).statusCode).toBe(200);
      await none.app.usage.flush();
      expect(await none.db.query('SELECT 1 FROM usage_hours WHERE hour >= $1', [iso(hour)])).toEqual([]);
      clock.advance(2 * MINUTE);
      await eventually(async () => (await none.db.query('SELECT 1 FROM usage_hours')).length === 0, 10_000);
    } finally {
      await none.close();
    }
  });
});
