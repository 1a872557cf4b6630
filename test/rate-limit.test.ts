import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryStore } from '../src/plugins/rate-limit/memory-store.js';
import { buildTestApp, type TestApp } from './support/app.js';
import { createTestDatabase, POSTGRES_URL } from './support/databases.js';
import { eventually } from './support/eventually.js';
import { startServer } from './support/processes.js';
import { RATE_LIMIT_STORES, REDIS_URL, redisStoreEnv } from './support/redis.js';

const MINUTE = 60_000;
const DAY = 86_400_000;
/** 10:00:00 UTC on a Sunday: the start of a minute, 14 hours before the day ends. */
const T0 = Date.UTC(2026, 10, 22, 10, 0, 0);
const SUNSET = Date.UTC(2030, 11, 5);

describe.each(RATE_LIMIT_STORES)('rate limiting with the $name store', (store) => {
  let t: TestApp;
  let clock = T0;
  const keyOf = async (perMinute: number, perDay: number) => {
    const { key } = await t.app.apiKeysRepository.create({ plan: 'enterprise', limits: { perMinute, perDay } });
    const headers = { authorization: `Bearer ${key}` };
    // The new key reaches the keyring by NOTIFY; wait without spending its quota (a 401 costs the address).
    await eventually(async () => {
      clock += DAY;
      return (await t.app.inject({ url: '/v1/pets/0', headers })).statusCode === 400;
    });
    clock = (Math.floor(clock / DAY) + 1) * DAY + 10 * 60 * MINUTE;
    return headers;
  };
  const get = (url: string, headers: Record<string, string> = {}) => t.app.inject({ url, headers });

  beforeAll(async () => {
    if (store.usesRedis && !REDIS_URL) return;
    t = await buildTestApp(store.env(), { now: () => clock });
  });
  afterAll(() => t?.close());

  describe.skipIf(store.usesRedis && !REDIS_URL)('', () => {
    it('every /v1 response carries the headers: 200, 201, 400, 401, 404, 405, 410, 429 and 500', async () => {
      const auth = await keyOf(1000, 100_000);
      const responses = {
        200: await get('/v1/pets', auth),
        201: await t.app.inject({ method: 'POST', url: '/v1/pets', payload: { name: 'Rex', categoryId: 1 }, headers: auth }),
        400: await get('/v1/pets?limit=0', auth),
        401: await get('/v1/pets'),
        404: await get('/v1/pets/4242', auth),
        '404 route': await get('/v1/orders', auth),
        405: await t.app.inject({ method: 'DELETE', url: '/v1/pets', headers: auth }),
      } as Record<string, Awaited<ReturnType<typeof get>>>;
      clock = SUNSET;
      responses[410] = await get('/v1/pets/1', auth);
      clock = T0 + 5 * DAY;
      await t.db.query('ALTER TABLE pets RENAME TO pets_away');
      responses[500] = await get('/v1/pets', auth);
      await t.db.query('ALTER TABLE pets_away RENAME TO pets');
      const limited = await keyOf(1, 1000);
      await get('/v1/pets', limited);
      responses[429] = await get('/v1/pets', limited);

      for (const [status, response] of Object.entries(responses)) {
        expect(response.statusCode, status).toBe(Number.parseInt(status));
        expect(response.headers['x-ratelimit-limit'], status).toMatch(/^\d+$/);
        expect(response.headers['x-ratelimit-remaining'], status).toMatch(/^\d+$/);
        expect(response.headers['x-ratelimit-reset'], status).toMatch(/^\d{10}$/);
        expect(response.headers['ratelimit-policy'], status).toMatch(/^"minute";q=\d+;w=60, "day";q=\d+;w=86400$/);
        expect(response.headers.ratelimit, status).toMatch(/^"minute";r=\d+;t=\d+, "day";r=\d+;t=\d+$/);
      }
    });

    it('describes the binding window: fewer left wins, the minute on a tie, the day once spent', async () => {
      const auth = await keyOf(5, 8);
      const minuteStart = clock - (clock % MINUTE);
      const dayEnd = (clock - (clock % DAY) + DAY) / 1000;
      const expectHeaders = (response: Awaited<ReturnType<typeof get>>, limit: number, remaining: number, reset: number) => {
        expect(response.headers['x-ratelimit-limit']).toBe(String(limit));
        expect(response.headers['x-ratelimit-remaining']).toBe(String(remaining));
        expect(response.headers['x-ratelimit-reset']).toBe(String(reset));
      };
      clock = minuteStart + 30_000;
      const first = await get('/v1/pets', auth);
      expectHeaders(first, 5, 4, (minuteStart + MINUTE) / 1000);
      expect(first.headers['ratelimit-policy']).toBe('"minute";q=5;w=60, "day";q=8;w=86400');
      expect(first.headers.ratelimit).toBe(`"minute";r=4;t=30, "day";r=7;t=${dayEnd - clock / 1000}`);
      await get('/v1/pets', auth);
      await get('/v1/pets', auth);

      clock = minuteStart + MINUTE;
      expectHeaders(await get('/v1/pets', auth), 5, 4, (minuteStart + 2 * MINUTE) / 1000); // 4 and 4: a tie
      await get('/v1/pets', auth);
      await get('/v1/pets', auth);

      clock = minuteStart + 2 * MINUTE;
      expectHeaders(await get('/v1/pets', auth), 8, 1, dayEnd); // minute 4, day 1
      expectHeaders(await get('/v1/pets', auth), 8, 0, dayEnd); // the day is spent

      const refused = await get('/v1/pets', auth);
      expect(refused.statusCode).toBe(429);
      expect(refused.json()).toEqual({ code: 'rate_limited', message: expect.stringContaining('per day'), status: 429 });
      expectHeaders(refused, 8, 0, dayEnd);
      expect(refused.headers['retry-after']).toBe(String(dayEnd - clock / 1000));

      clock = (dayEnd + 1) * 1000;
      expect((await get('/v1/pets', auth)).statusCode).toBe(200);
    });

    it('refused requests count in neither window', async () => {
      const auth = await keyOf(3, 100);
      for (let i = 0; i < 3; i++) expect((await get('/v1/pets', auth)).statusCode).toBe(200);
      clock += 15_000;
      for (let i = 0; i < 5; i++) {
        const refused = await get('/v1/pets', auth);
        expect(refused.statusCode).toBe(429);
        expect(refused.headers['x-ratelimit-remaining']).toBe('0');
        expect(Number(refused.headers['retry-after'])).toBe(Math.ceil((MINUTE - (clock % MINUTE)) / 1000));
      }
      clock += MINUTE;
      const next = await get('/v1/pets', auth);
      expect(next.statusCode).toBe(200);
      expect(next.headers['x-ratelimit-remaining']).toBe('2');
      expect(next.headers.ratelimit).toMatch(/"day";r=96;/);
    });

    it('bans a key that keeps sending after its 429, for the ban duration, even after its windows reset', async () => {
      const auth = await keyOf(2, 1000);
      const start = clock;
      await get('/v1/pets', auth);
      await get('/v1/pets', auth);
      for (let i = 0; i < 30; i++) expect((await get('/v1/pets', auth)).json().code).toBe('rate_limited');
      const banned = await get('/v1/pets', auth);
      expect(banned.statusCode).toBe(429);
      expect(banned.json()).toEqual({ code: 'api_key_banned', message: expect.any(String), status: 429 });
      expect(banned.headers['retry-after']).toBe('900');
      expect(banned.headers['x-ratelimit-remaining']).toBe('0');
      expect(banned.headers['x-ratelimit-reset']).toBe(String(Math.ceil((start + 900_000) / 1000)));
      const logged = t.logs.entries().find((entry) => entry.msg === 'rate limit ban');
      expect(logged).toMatchObject({ keyId: expect.any(Number), until: new Date(start + 900_000).toISOString() });

      clock = start + 5 * MINUTE;
      const later = await get('/v1/pets', auth);
      expect(later.json().code).toBe('api_key_banned');
      expect(later.headers['retry-after']).toBe('600');
      clock = start + 900_000;
      expect((await get('/v1/pets', auth)).statusCode).toBe(200);
    });

    it('never bans a client that backs off as Retry-After says', async () => {
      const auth = await keyOf(2, 10_000);
      const statuses: Record<string, number> = {};
      for (let i = 0; i < 300; i++) {
        const response = await get('/v1/pets', auth);
        const code = response.statusCode === 200 ? 'ok' : response.json().code;
        statuses[code] = (statuses[code] ?? 0) + 1;
        clock += response.statusCode === 429 ? Number(response.headers['retry-after']) * 1000 : 1_000;
      }
      expect(statuses.api_key_banned).toBeUndefined();
      expect(statuses.ok).toBeGreaterThan(150);
      expect(statuses.rate_limited).toBeGreaterThan(50);
    });

    it('limits callers without a valid key by address, as the Free plan', async () => {
      clock = T0 + 30 * DAY;
      for (let i = 0; i < 60; i++) {
        const response = await get('/v1/pets', { authorization: `Bearer psk_${'x'.repeat(43)}`, 'x-forwarded-for': `10.0.0.${i}` });
        expect(response.statusCode).toBe(401);
        expect(response.headers['x-ratelimit-remaining']).toBe(String(59 - i));
      }
      const refused = await get('/v1/pets', { 'x-forwarded-for': '10.9.9.9' });
      expect(refused.statusCode).toBe(429);
      expect(refused.json().code).toBe('rate_limited');
    });

    it('does not limit health and readiness', async () => {
      for (let i = 0; i < 100; i++) {
        for (const path of ['/healthz', '/readyz']) {
          const response = await get(path);
          expect(response.statusCode, path).toBe(200);
          expect(response.headers['x-ratelimit-limit']).toBeUndefined();
        }
      }
    });
  });
});

describe('behind a trusted proxy', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await buildTestApp({ TRUST_PROXY: '127.0.0.1, 10.0.0.0/8' }, { now: () => T0 });
  });
  afterAll(() => t.close());

  it('limits each client address from X-Forwarded-For separately', async () => {
    const send = (address: string) =>
      t.app.inject({ url: '/v1/pets', headers: { 'x-forwarded-for': address }, remoteAddress: '127.0.0.1' });
    for (let i = 0; i < 60; i++) expect((await send('203.0.113.7')).statusCode).toBe(401);
    expect((await send('203.0.113.7')).statusCode).toBe(429);
    const other = await send('203.0.113.8');
    expect(other.statusCode).toBe(401);
    expect(other.headers['x-ratelimit-remaining']).toBe('59');
  });
});

describe('memory stays bounded', () => {
  it('forgets the least recently seen subjects past the cap, and expired ones on a sweep', async () => {
    const store = new MemoryStore({ threshold: 30, durationMs: 900_000 }, { maxSubjects: 1_000 });
    for (let i = 0; i < 50_000; i++) store.decide(`ip:flood-${i}`, { perMinute: 60, perDay: 1000 }, T0);
    expect(store.size).toBe(1_000);
    store.sweep(T0 + DAY);
    expect(store.size).toBe(0);
    await store.close();
  });
});

describe.skipIf(!REDIS_URL || !POSTGRES_URL)('several instances sharing Redis', () => {
  it('three server processes behind round robin enforce one Free key exactly: 100 requests, 60 successes', async () => {
    const database = await createTestDatabase();
    const env = { DATABASE_URL: database.url!, ...redisStoreEnv() };
    const servers = await Promise.all([startServer({ env }), startServer({ env }), startServer({ env })]);
    try {
      const { key } = await (await import('../src/repositories/api-keys.js')).createApiKeysRepository(database.db).create({ plan: 'free' });
      const headers = { authorization: `Bearer ${key}` };
      await Promise.all(servers.map((server) => eventually(async () => (await fetch(`${server.origin}/healthz`)).ok)));
      // Wait for the key to reach every instance through NOTIFY without spending it: keyring checks cost nothing.
      await new Promise((resolve) => setTimeout(resolve, 500));
      // All 100 requests must fall in one minute window.
      if (Date.now() % MINUTE > 45_000) await new Promise((resolve) => setTimeout(resolve, MINUTE - (Date.now() % MINUTE) + 100));
      const statuses = await Promise.all(
        Array.from({ length: 100 }, (_, i) => fetch(`${servers[i % 3]!.origin}/v1/pets`, { headers }).then((r) => r.status)),
      );
      expect(statuses.filter((status) => status === 200)).toHaveLength(60);
      expect(statuses.filter((status) => status === 429)).toHaveLength(40);
    } finally {
      await Promise.all(servers.map((server) => server.stop()));
      await database.drop();
    }
  });
});
