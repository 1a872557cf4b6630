import type { FastifyInstance } from 'fastify';
import ipaddr from 'ipaddr.js';
import { describe, expect, it } from 'vitest';
import { clientOf } from '../../src/rate-limit/address.js';
import { MemoryStore } from '../../src/rate-limit/stores/memory-store.js';
import { ANONYMOUS } from '../../src/rate-limit/subjects.js';
import { minuteAndDay } from '../../src/plans/limits.js';
import { POSTGRES_URL } from '../support/databases.js';
import { eventually } from '../support/eventually.js';
import { databaseTest as databaseFixtures, describeAppTest } from '../support/fixtures.js';
import { startServer } from '../../harness/processes.js';
import { buildTestApp } from '../support/app.js';
import { portOf } from '../support/http.js';
import { bearer, waitForKey } from '../support/keys.js';
import { closedWithin, openSocket, type RawClient } from '../support/raw-socket.js';
import { RATE_LIMIT_STORES, REDIS_URL, redisStoreEnv } from '../support/redis.js';
import { DAY, MINUTE, sleep, SUNSET, T0, testClock } from '../support/time.js';

// T0 is 10:00:00 UTC on a Sunday: the start of a minute, 14 hours before the day ends.

describe.each(RATE_LIMIT_STORES)('rate limiting with the $name store', (store) => {
  const test = describeAppTest({ clock: T0, envAtBuild: store.env })
    /** A key with the limits given, usable, and the clock at 10:00 on the next day. */
    .extend('keyOf', ({ t, clock }) => async (perMinute: number, perDay: number) => {
      const { key } = await t.app.apiKeysRepository.create({ plan: 'enterprise', limits: minuteAndDay(perMinute, perDay) });
      const headers = bearer(key);
      // Each try a day later, so that waiting spends none of the quota the test then counts.
      await waitForKey(async () => {
        clock.advance(DAY);
        return (await t.app.inject({ url: '/v1/pets/0', headers })).statusCode;
      });
      clock.set((Math.floor(clock.now() / DAY) + 1) * DAY + 10 * 60 * MINUTE);
      return headers;
    })
    .extend(
      'get',
      ({ t }) =>
        (url: string, headers: Record<string, string> = {}) =>
          t.app.inject({ url, headers }),
    );

  describe.skipIf(store.usesRedis && !REDIS_URL)('', () => {
    test('every /v1 response carries the headers: 200, 201, 400, 401, 404, 405, 410, 429 and 500', async ({ t, clock, keyOf, get }) => {
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
      clock.set(SUNSET);
      responses[410] = await get('/v1/pets/1', auth);
      clock.set(T0 + 5 * DAY);
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

    test('describes the binding window: fewer left wins, the minute on a tie, the day once spent', async ({ clock, keyOf, get }) => {
      const auth = await keyOf(5, 8);
      const minuteStart = clock.now() - (clock.now() % MINUTE);
      const dayEnd = (clock.now() - (clock.now() % DAY) + DAY) / 1000;
      const expectHeaders = (response: Awaited<ReturnType<typeof get>>, limit: number, remaining: number, reset: number) => {
        expect(response.headers['x-ratelimit-limit']).toBe(String(limit));
        expect(response.headers['x-ratelimit-remaining']).toBe(String(remaining));
        expect(response.headers['x-ratelimit-reset']).toBe(String(reset));
      };
      clock.set(minuteStart + 30_000);
      const first = await get('/v1/pets', auth);
      expectHeaders(first, 5, 4, (minuteStart + MINUTE) / 1000);
      expect(first.headers['ratelimit-policy']).toBe('"minute";q=5;w=60, "day";q=8;w=86400');
      expect(first.headers.ratelimit).toBe(`"minute";r=4;t=30, "day";r=7;t=${dayEnd - clock.now() / 1000}`);
      await get('/v1/pets', auth);
      await get('/v1/pets', auth);

      clock.set(minuteStart + MINUTE);
      expectHeaders(await get('/v1/pets', auth), 5, 4, (minuteStart + 2 * MINUTE) / 1000); // 4 and 4: a tie
      await get('/v1/pets', auth);
      await get('/v1/pets', auth);

      clock.set(minuteStart + 2 * MINUTE);
      expectHeaders(await get('/v1/pets', auth), 8, 1, dayEnd); // minute 4, day 1
      expectHeaders(await get('/v1/pets', auth), 8, 0, dayEnd); // the day is spent

      const refused = await get('/v1/pets', auth);
      expect(refused.statusCode).toBe(429);
      expect(refused.json()).toEqual({ code: 'rate_limited', message: expect.stringContaining('per day'), status: 429 });
      expectHeaders(refused, 8, 0, dayEnd);
      expect(refused.headers['retry-after']).toBe(String(dayEnd - clock.now() / 1000));

      clock.set((dayEnd + 1) * 1000);
      expect((await get('/v1/pets', auth)).statusCode).toBe(200);
    });

    test('refused requests count in neither window', async ({ clock, keyOf, get }) => {
      const auth = await keyOf(3, 100);
      for (let i = 0; i < 3; i++) expect((await get('/v1/pets', auth)).statusCode).toBe(200);
      clock.advance(15_000);
      for (let i = 0; i < 5; i++) {
        const refused = await get('/v1/pets', auth);
        expect(refused.statusCode).toBe(429);
        expect(refused.headers['x-ratelimit-remaining']).toBe('0');
        expect(Number(refused.headers['retry-after'])).toBe(Math.ceil((MINUTE - (clock.now() % MINUTE)) / 1000));
      }
      clock.advance(MINUTE);
      const next = await get('/v1/pets', auth);
      expect(next.statusCode).toBe(200);
      expect(next.headers['x-ratelimit-remaining']).toBe('2');
      expect(next.headers.ratelimit).toMatch(/"day";r=96;/);
    });

    test('bans a key that keeps sending after its 429, for the ban duration, even after its windows reset', async ({
      t,
      clock,
      keyOf,
      get,
    }) => {
      const auth = await keyOf(2, 1000);
      const start = clock.now();
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

      clock.set(start + 5 * MINUTE);
      const later = await get('/v1/pets', auth);
      expect(later.json().code).toBe('api_key_banned');
      expect(later.headers['retry-after']).toBe('600');
      clock.set(start + 900_000);
      expect((await get('/v1/pets', auth)).statusCode).toBe(200);
    });

    test('never bans a client that backs off as Retry-After says', async ({ clock, keyOf, get }) => {
      const auth = await keyOf(2, 10_000);
      const statuses: Record<string, number> = {};
      for (let i = 0; i < 300; i++) {
        const response = await get('/v1/pets', auth);
        const code = response.statusCode === 200 ? 'ok' : response.json().code;
        statuses[code] = (statuses[code] ?? 0) + 1;
        clock.advance(response.statusCode === 429 ? Number(response.headers['retry-after']) * 1000 : 1_000);
      }
      expect(statuses.api_key_banned).toBeUndefined();
      expect(statuses.ok).toBeGreaterThan(150);
      expect(statuses.rate_limited).toBeGreaterThan(50);
    });

    test('limits callers without a valid key by address, as the Free plan', async ({ clock, get }) => {
      clock.set(T0 + 30 * DAY);
      for (let i = 0; i < 60; i++) {
        const response = await get('/v1/pets', { authorization: `Bearer psk_${'x'.repeat(43)}`, 'x-forwarded-for': `10.0.0.${i}` });
        expect(response.statusCode).toBe(401);
        expect(response.headers['x-ratelimit-remaining']).toBe(String(59 - i));
      }
      const refused = await get('/v1/pets', { 'x-forwarded-for': '10.9.9.9' });
      expect(refused.statusCode).toBe(429);
      expect(refused.json().code).toBe('rate_limited');
    });

    test('does not limit health and readiness', async ({ get }) => {
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

describe.each(RATE_LIMIT_STORES)('behind a trusted proxy, with the $name store', (store) => {
  const test = describeAppTest({ env: { TRUST_PROXY: '127.0.0.1, 10.0.0.0/8' }, clock: T0, envAtBuild: store.env })
    // A fresh day for every test: no window of an earlier one is still open.
    .extend('freshDay', { auto: true }, ({ clock }) => clock.advance(DAY));
  const sendFrom = (app: FastifyInstance) => (address: string) =>
    app.inject({ url: '/v1/pets', headers: { 'x-forwarded-for': address }, remoteAddress: '127.0.0.1' });

  describe.skipIf(store.usesRedis && !REDIS_URL)('', () => {
    test('limits each client address from X-Forwarded-For separately', async ({ t }) => {
      const send = sendFrom(t.app);
      for (let i = 0; i < 60; i++) expect((await send('203.0.113.7')).statusCode).toBe(401);
      expect((await send('203.0.113.7')).statusCode).toBe(429);
      const other = await send('203.0.113.8');
      expect(other.statusCode).toBe(401);
      expect(other.headers['x-ratelimit-remaining']).toBe('59');
    });

    test('counts the addresses of one IPv6 /64 as one client, and another /64 apart', async ({ t }) => {
      const send = sendFrom(t.app);
      const addresses = ['2001:db8:1:2::1', '2001:db8:1:2::2', '2001:db8:1:2:ffff:ffff:ffff:fffe', '2001:0db8:0001:0002:0:0:0:abcd'];
      for (let i = 0; i < 60; i++) expect((await send(addresses[i % 4]!)).statusCode).toBe(401);
      for (const address of addresses) expect((await send(address)).statusCode, address).toBe(429);
      const other = await send('2001:db8:1:3::1');
      expect(other.statusCode).toBe(401);
      expect(other.headers['x-ratelimit-remaining']).toBe('59');
    });

    test('counts one IPv4 address as one client however it is written', async ({ t }) => {
      const send = sendFrom(t.app);
      const forms = ['198.51.100.4', '::ffff:198.51.100.4', '::ffff:c633:6404', '0:0:0:0:0:ffff:198.51.100.4'];
      for (let i = 0; i < 60; i++) expect((await send(forms[i % 4]!)).statusCode).toBe(401);
      for (const form of forms) expect((await send(form)).statusCode, form).toBe(429);
      expect((await send('198.51.100.5')).statusCode).toBe(401);
    });
  });
});

describe('the client an address counts as', () => {
  it('is an IPv4 address in its usual form, an IPv6 network of RATE_LIMIT_IPV6_PREFIX bits, or the text of anything else', () => {
    expect(clientOf('::FFFF:10.1.2.3', 64)).toBe('10.1.2.3');
    expect(clientOf('2001:db8:aaaa:bbbb:cccc::1', 64)).toBe('2001:db8:aaaa:bbbb::/64');
    expect(clientOf('2001:db8:aaaa:bbbb:cccc::1', 48)).toBe('2001:db8:aaaa::/48');
    expect(clientOf('2001:db8:aaaa:bbbb:cccc::1', 56)).toBe('2001:db8:aaaa:bb00::/56');
    expect(clientOf('2001:db8::1', 128)).toBe('2001:db8::1/128');
    expect(clientOf('not an address', 64)).toBe('not an address');
  });

  it.each([1, 7, 9, 33, 57, 60, 63, 65, 100, 127])(
    'under a /%i, counts IPv6 addresses that differ only after the prefix as one client, and inside it as two',
    (prefix) => {
      const base = ipaddr.parse('2001:db8:aaaa:bbbb:cccc:dddd:eeee:ffff').toByteArray();
      const flipped = (bit: number) => {
        const bytes = [...base];
        bytes[bit >> 3]! ^= 0x80 >> (bit & 7);
        return ipaddr.fromByteArray(bytes).toString();
      };
      const client = clientOf(ipaddr.fromByteArray(base).toString(), prefix);
      expect(clientOf(flipped(prefix), prefix), 'the first bit after the prefix').toBe(client);
      expect(clientOf(flipped(127), prefix), 'the last bit').toBe(client);
      expect(clientOf(flipped(prefix - 1), prefix), 'the last bit of the prefix').not.toBe(client);
      expect(clientOf(flipped(0), prefix), 'the first bit').not.toBe(client);
    },
  );

  it('writes a network whose prefix ends inside a byte with the bits after it cleared', () => {
    expect(clientOf('2001:db8:aaaa:bbbf:ffff::1', 60)).toBe('2001:db8:aaaa:bbb0::/60');
    expect(clientOf('2001:db8:aaaa:bbbf:ffff::1', 63)).toBe('2001:db8:aaaa:bbbe::/63');
  });
});

describe('a request answered before the limiter decides it', () => {
  it('the 503 of a closing server, under /v1, carries the headers of its key as they stand, counting nothing', async () => {
    const clock = testClock(T0);
    const t = await buildTestApp({}, { now: clock.now });
    let closing: Promise<void> | undefined;
    let client: RawClient | undefined;
    try {
      const before = await t.app.inject({ url: '/v1/pets?limit=1', headers: t.auth });
      client = await openSocket(await portOf(t.app));
      // The request's head is begun before the close, so that its connection is not idle and stays open through it.
      client.socket.write(
        `GET /v1/pets?limit=1 HTTP/1.1\r\nHost: x\r\nOrigin: https://shop.example.com\r\nAuthorization: ${t.auth.authorization}\r\n`,
      );
      closing = t.close();
      await eventually(async () => t.app.shutdown.draining);
      client.socket.write('\r\n');
      expect(await closedWithin(client, 5_000)).toBe(true);
      const [head = '', body = ''] = client.received.split('\r\n\r\n');
      const headers = new Map(
        head.split('\r\n').map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]),
      );
      expect(head).toMatch(/^HTTP\/1.1 503 /);
      expect(JSON.parse(body)).toEqual({ code: 'service_unavailable', message: expect.any(String), status: 503 });
      expect(headers.get('x-ratelimit-limit')).toBe('1000000000');
      expect(headers.get('x-ratelimit-remaining')).toBe(before.headers['x-ratelimit-remaining']);
      expect(headers.get('x-ratelimit-reset')).toBe(before.headers['x-ratelimit-reset']);
      // A page can read it (CORS_ORIGINS: any origin).
      expect(headers.get('access-control-allow-origin')).toBe('*');
    } finally {
      client?.socket.destroy();
      await (closing ?? t.close());
    }
  });
});

describe('memory stays bounded', () => {
  it('forgets the least recently seen subjects past the cap, and expired ones on a sweep', async () => {
    const store = new MemoryStore({ threshold: 30, durationMs: 900_000 }, { maxSubjects: 1_000 });
    for (let i = 0; i < 50_000; i++) await store.consume(`ip:flood-${i}`, ANONYMOUS, T0, 1, true);
    expect(store.size).toBe(1_000);
    // A day's counts are kept through the next day, which a sliding day counts a share of.
    store.sweep(T0 + DAY);
    expect(store.size).toBe(1_000);
    store.sweep(T0 + 2 * DAY);
    expect(store.size).toBe(0);
    await store.close();
  });
});

// The servers below open it and run the migrations themselves.
const databaseTest = databaseFixtures({ migrated: false });

describe.skipIf(!REDIS_URL || !POSTGRES_URL)('several instances sharing Redis', () => {
  databaseTest(
    'three server processes behind round robin enforce one Free key exactly: 100 requests, 60 successes',
    async ({ database }) => {
      // Exactness of the windows under a burst: no concurrency limit (a Free key's 5 would refuse most of it first).
      const env = { DATABASE_URL: database.url!, ...redisStoreEnv(), RATE_LIMIT_CONCURRENCY: 'off' };
      const servers = await Promise.all([startServer({ env }), startServer({ env }), startServer({ env })]);
      try {
        const { key } = await (
          await import('../../src/api-keys/repository.js')
        )
          .createApiKeysRepository(database.db)
          .create({ plan: 'free' });
        const headers = bearer(key);
        await Promise.all(servers.map((server) => eventually(async () => (await fetch(`${server.origin}/healthz`)).ok)));
        // All 100 requests must fall in one minute window.
        if (Date.now() % MINUTE > 45_000) await sleep(MINUTE - (Date.now() % MINUTE) + 100);
        const statuses = await Promise.all(
          Array.from({ length: 100 }, (_, i) => fetch(`${servers[i % 3]!.origin}/v1/pets`, { headers }).then((r) => r.status)),
        );
        expect(statuses.filter((status) => status === 200)).toHaveLength(60);
        expect(statuses.filter((status) => status === 429)).toHaveLength(40);
      } finally {
        await Promise.all(servers.map((server) => server.stop()));
      }
    },
  );
});
