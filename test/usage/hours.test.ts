import type { FastifyInstance } from 'fastify';
import { describe } from 'vitest';
import { adminFixture, type TestAdmin } from '../support/admin.js';
import { eventually } from '../support/eventually.js';
import { appTest, expect } from '../support/fixtures.js';
import { portOf } from '../support/http.js';
import { bearer, keyInFreshWindows } from '../support/keys.js';
import { openSocket } from '../support/raw-socket.js';
import { DAY, MINUTE, T0, type TestClock } from '../support/time.js';

const HOUR = 60 * MINUTE;
const SECOND = 1_000;

/** One app for the file on the test's clock: createPet costs 3 units. */
const test = appTest({ clock: T0, env: { RATE_LIMIT_COSTS: 'createPet=3', USAGE_RETENTION_DAYS: '30' } }).extend(
  'admin',
  { scope: 'file' },
  adminFixture,
);

const iso = (time: number) => new Date(time).toISOString();
const none = { rateLimited: 0, concurrency: 0, credits: 0, banned: 0 };

/** A new key in windows of its own, on a day of its own (`day` days after T0): the hours a test reads hold only what it sent. */
async function freshKey(app: FastifyInstance, clock: TestClock, day: number) {
  if (clock.now() < T0 + day * DAY) clock.set(T0 + day * DAY);
  const { headers, quotaId } = await keyInFreshWindows(app, clock, { plan: 'business', concurrency: 10 });
  // A first key's quota is its own id.
  return { headers, quotaId, keyId: quotaId };
}

/** The key's rows of the hours from `from` to `to` (exclusive), by operation, once this instance has written what it counted. */
async function rowsOf(app: FastifyInstance, admin: TestAdmin, keyId: number, from: number, to: number) {
  await app.usage.flush();
  const response = await admin.server.inject({
    url: `/admin/v1/usage?keyId=${keyId}&start=${iso(from)}&end=${iso(to)}&groupBy=operation`,
    headers: bearer(admin.read.token),
  });
  expect(response.statusCode, response.body).toBe(200);
  return response.json<unknown[]>();
}

describe('the hour a request counts in', () => {
  test('the hour of its decision: four creates decided at 22:59:59 and answered at 23:00:01 count in 22:00', async ({
    t,
    clock,
    admin,
  }) => {
    const { headers, quotaId, keyId } = await freshKey(t.app, clock, 1);
    const hour = Math.floor(clock.now() / DAY) * DAY + 22 * HOUR;
    clock.set(hour + HOUR - SECOND);
    // Four creates admitted (each holds a slot of the key's concurrency) with their bodies not yet sent.
    const body = '{"name":"Late","categoryId":1}';
    const held = await Promise.all(Array.from({ length: 4 }, async () => openSocket(await portOf(t.app))));
    for (const { socket } of held) {
      socket.write(
        `POST /v1/pets HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: ${headers.authorization}\r\n` +
          `Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 8)}`,
      );
    }
    await eventually(async () => (await t.app.rateLimit.inFlight({ quotaId, customerId: null }, clock.now())) === 4);
    // Answered two seconds later, in the next hour.
    clock.set(hour + HOUR + SECOND);
    for (const { socket } of held) socket.write(body.slice(8));
    await eventually(async () => held.every(({ received }) => received.startsWith('HTTP/1.1 201')));
    for (const { socket } of held) socket.destroy();
    expect(await rowsOf(t.app, admin, keyId, hour, hour + 2 * HOUR)).toEqual([
      { start: iso(hour), operation: 'createPet', requests: 4, units: 12, refused: none },
    ]);
  });

  test('the hour it falls in, floored: a request at hh:40 counts in hh:00, not in the next hour', async ({ t, clock, admin }) => {
    const { headers, keyId } = await freshKey(t.app, clock, 2);
    const hour = Math.floor(clock.now() / DAY) * DAY + 15 * HOUR;
    clock.set(hour + 40 * MINUTE);
    expect((await t.app.inject({ url: '/v1/rate_limit', headers })).statusCode).toBe(200);
    expect(await rowsOf(t.app, admin, keyId, hour - HOUR, hour + 2 * HOUR)).toEqual([
      { start: iso(hour), operation: 'getRateLimit', requests: 1, units: 0, refused: none },
    ]);
  });
});

describe('a write of the record that fails', () => {
  test('keeps its counts and those made while it was under way: both reach the record at the next write', async ({ t, clock, admin }) => {
    const { headers, keyId } = await freshKey(t.app, clock, 3);
    const hour = Math.floor(clock.now() / HOUR) * HOUR;
    const lookup = async () => expect((await t.app.inject({ url: '/v1/rate_limit', headers })).statusCode).toBe(200);
    await lookup();
    await lookup();
    let failing: Promise<void> | undefined;
    // A transaction that renames the table holds it (PostgreSQL's lock; PGlite's one connection): the write waits, then fails.
    await t.app.db.transaction(async (tx) => {
      await tx.query('ALTER TABLE usage_hours RENAME TO usage_hours_away');
      failing = t.app.usage.flush();
      await new Promise((resolve) => setImmediate(resolve));
      // Counted while the write is under way, in the same hour, key and operation as the write's.
      for (let i = 0; i < 3; i++) await lookup();
    });
    await failing;
    expect(t.logs.entries().filter((entry) => String(entry.msg).startsWith('usage: writing the usage record failed'))).not.toEqual([]);
    await t.app.db.query('ALTER TABLE usage_hours_away RENAME TO usage_hours');
    expect(await rowsOf(t.app, admin, keyId, hour, hour + HOUR)).toEqual([
      { start: iso(hour), operation: 'getRateLimit', requests: 5, units: 0, refused: none },
    ]);
  });
});
