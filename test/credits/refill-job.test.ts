import { createServer } from 'node:http';
import { describe, expect, test } from 'vitest';
import { openAdmin, type TestAdmin } from '../support/admin.js';
import { buildTestApp, type TestApp } from '../support/app.js';
import { POSTGRES_URL } from '../support/databases.js';
import { eventually } from '../support/eventually.js';
import { T0, testClock, type TestClock } from '../support/time.js';

const SECRET = 'whsec_0123456789abcdef0123456789abcdef';

/** A receiver of the webhook's events on a loopback port: answers 204, keeps the bodies. */
async function startReceiver() {
  const bodies: string[] = [];
  const server = createServer((request, response) => {
    let body = '';
    request.setEncoding('utf8');
    request.on('data', (chunk: string) => (body += chunk));
    request.on('end', () => {
      bodies.push(body);
      response.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return { bodies, url: `http://127.0.0.1:${port}/hooks`, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

interface Balance {
  id: number;
  base: number;
  spent: number;
  version: number;
  next_refill_at: Date;
}
const balanceOf = async (t: TestApp, column: 'customer_id' | 'quota_id', id: number) =>
  (await t.db.query<Balance>(`SELECT id, base, spent, version, next_refill_at FROM credit_balances WHERE ${column} = $1`, [id]))[0]!;

const refilledEvents = async (t: TestApp) =>
  t.db.query<{ dedupe_key: string; body: string }>(
    "SELECT dedupe_key, body FROM webhook_deliveries WHERE type = 'credits.refilled' ORDER BY id",
  );

/** Runs `use` with `count` apps on one database (the first's), reading one test clock, with the webhook to a receiver. */
async function withApps(count: number, use: (apps: TestApp[], admin: TestAdmin, clock: TestClock, bodies: string[]) => Promise<void>) {
  const receiver = await startReceiver();
  const clock = testClock(T0);
  const env = { WEBHOOK_URL: receiver.url, WEBHOOK_SECRET: SECRET };
  const apps: TestApp[] = [await buildTestApp(env, { now: clock.now })];
  try {
    while (apps.length < count) apps.push(await buildTestApp({ ...env, DATABASE_URL: apps[0]!.databaseUrl! }, { now: clock.now }));
    const admin = await openAdmin(apps[0]!.app);
    try {
      await use(apps, admin, clock, receiver.bodies);
    } finally {
      await admin.close();
    }
  } finally {
    for (const app of apps.reverse()) await app.close();
    await receiver.close();
  }
}

test('a balance due is refilled by the job: remaining becomes the amount, a new version, the next refill a day on; credits.refilled sent', async () => {
  await withApps(1, async ([t], admin, clock, bodies) => {
    const created = await admin.request('POST', '/admin/v1/customers', {
      json: { externalId: 'cus_refilled', credits: { remaining: 100, refill: { interval: 'day', amount: 500 } } },
    });
    const customerId = created.body.id as number;
    await t!.db.query('UPDATE credit_balances SET spent = 80, exhausted_version = 1 WHERE customer_id = $1', [customerId]);
    expect((await admin.request('GET', `/admin/v1/customers/${customerId}`)).body.credits.remaining).toBe(20);

    clock.set(Date.parse('2026-11-23T00:00:00.250Z'));
    await eventually(async () => (await balanceOf(t!, 'customer_id', customerId)).version === 2);
    const balance = await balanceOf(t!, 'customer_id', customerId);
    expect(balance).toMatchObject({ base: 500, spent: 0, version: 2, next_refill_at: new Date('2026-11-24T00:00:00Z') });
    const [exhausted] = await t!.db.query('SELECT exhausted_version FROM credit_balances WHERE id = $1', [balance.id]);
    expect(exhausted).toEqual({ exhausted_version: null });
    expect((await admin.request('GET', `/admin/v1/customers/${customerId}`)).body.credits).toEqual({
      remaining: 500,
      refill: { interval: 'day', amount: 500 },
      refillAt: '2026-11-24T00:00:00.000Z',
    });

    const [recorded] = await refilledEvents(t!);
    expect(recorded!.dedupe_key).toBe(`credits.refilled:${balance.id}:2`);
    await eventually(async () => bodies.length > 0);
    expect(JSON.parse(bodies[0]!)).toEqual({
      id: expect.any(String),
      type: 'credits.refilled',
      createdAt: '2026-11-23T00:00:00.250Z',
      data: { owner: 'customer', balanceId: balance.id, customerId, remaining: 500, refillAt: '2026-11-24T00:00:00.000Z' },
    });
  });
});

describe.runIf(POSTGRES_URL)('two instances on one database', () => {
  test('each balance due is refilled once, with one event, whichever instance got to it; a key’s names its quota', async () => {
    await withApps(2, async ([a, b], admin, clock) => {
      const ids: number[] = [];
      for (let i = 0; i < 20; i++) {
        const key = await admin.request('POST', '/admin/v1/keys', {
          json: { plan: 'pro', credits: { remaining: i, refill: { interval: 'month', amount: 1_000, dayOfMonth: 31 } } },
        });
        expect(key.status, JSON.stringify(key.body)).toBe(201);
        ids.push(key.body.id as number);
      }
      // Both instances look for due balances every second: the clock moves for both at once, to November's last day.
      clock.set(Date.parse('2026-11-30T00:00:01Z'));
      await eventually(async () => {
        const versions = await a!.db.query<{ version: number }>('SELECT version FROM credit_balances WHERE quota_id = ANY($1::bigint[])', [
          ids,
        ]);
        return versions.every((row) => row.version === 2);
      }, 10_000);
      for (const id of ids) {
        expect(await balanceOf(b!, 'quota_id', id)).toMatchObject({
          base: 1_000,
          version: 2,
          next_refill_at: new Date('2026-12-31T00:00:00Z'),
        });
      }
      const events = await refilledEvents(a!);
      expect(events).toHaveLength(20);
      const data = events.map((event) => (JSON.parse(event.body) as { data: Record<string, unknown> }).data);
      expect(data.map((each) => each.quotaId).sort((x, y) => Number(x) - Number(y))).toEqual(ids);
      expect(data[0]).toEqual({
        owner: 'key',
        balanceId: expect.any(Number),
        quotaId: expect.any(Number),
        remaining: 1_000,
        refillAt: '2026-12-31T00:00:00.000Z',
      });

      // A later refill, of a balance made due again, finds the others not due: refilled once.
      await a!.db.query("UPDATE credit_balances SET next_refill_at = '2026-11-29T00:00:00Z' WHERE quota_id = $1", [ids[0]]);
      await eventually(async () => (await balanceOf(a!, 'quota_id', ids[0]!)).version === 3);
      const versions = await a!.db.query<{ version: number }>('SELECT version FROM credit_balances WHERE quota_id = ANY($1::bigint[])', [
        ids.slice(1),
      ]);
      expect(versions.every((row) => row.version === 2)).toBe(true);
      expect(await refilledEvents(b!)).toHaveLength(21);
    });
  });
});
