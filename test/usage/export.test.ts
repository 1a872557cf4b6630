/**
 * The usage record sent to billing (issue 58): each closed hour as usage.hourly CloudEvents through the
 * signed webhooks, once across instances, a revision with the same id when a late write changes an hour
 * sent, and the backfill. Two apps on one database and one clock (the app's clock closes an hour).
 */
import { HTTP, type CloudEvent } from 'cloudevents';
import type { FastifyInstance } from 'fastify';
import { describe, test } from 'vitest';
import { loadConfig } from '../../src/config/load.js';
import { usageExports } from '../../src/usage/export-repository.js';
import { UsageExporter, type PassOutcome } from '../../src/usage/exporter.js';
import { createUsageExportRules } from '../../src/usage/rules.js';
import { nameBasedUuid, usageHourly } from '../../src/webhooks/events.js';
import { openAdmin, type TestAdmin } from '../support/admin.js';
import { POSTGRES_URL } from '../support/databases.js';
import { eventually } from '../support/eventually.js';
import { expect } from '../support/fixtures.js';
import { bearer, waitForKeyOnApp } from '../support/keys.js';
import { MINUTE, T0, testClock, type TestClock } from '../support/time.js';
import { closedAfterEach, startReceiver, verified, webhookEnv, type Received } from '../support/webhooks.js';

const HOUR = 60 * MINUTE;
/** The hour the tests' traffic is in, and when the export sends it: 5 minutes (the default delay) after it closes. */
const H = T0;
const SENT_AT = H + HOUR + 5 * MINUTE;
const iso = (at: number) => new Date(at).toISOString();

interface UsageHourly {
  id: string;
  subject: string;
  data: {
    customerId: number | null;
    externalId: string | null;
    keyId: number | null;
    operation: string | null;
    hour: string;
    requests: number;
    units: number;
    refused: Record<string, number>;
    revision: number;
  };
}

/** The usage.hourly events a receiver got, each checked as a CloudEvent by the CloudEvents SDK (it throws on an invalid one) and its signature. */
function usageEvents(received: Received[]): UsageHourly[] {
  return received
    .filter(({ headers }) => String(headers['content-type']).startsWith('application/cloudevents+json'))
    .map((one) => {
      expect(verified(one)).toBe(true);
      const event = HTTP.toEvent({ headers: one.headers, body: one.body }) as CloudEvent<UsageHourly['data']>;
      expect(event.validate()).toBe(true);
      expect(event).toMatchObject({ specversion: '1.0', type: 'usage.hourly', source: 'pet-store', datacontenttype: 'application/json' });
      expect(event.time).toBe(event.data!.hour);
      expect(one.headers['pet-store-event-id']).toBe(event.id);
      return { id: event.id, subject: event.subject!, data: event.data! };
    });
}

/** A customer with two keys and a key of no customer, made through the admin API; the customerless key's minute holds 3. */
async function seedCallers(admin: TestAdmin) {
  const customer = (await admin.request('POST', '/admin/v1/customers', { json: { externalId: 'cus_export' } })).body.id as number;
  const key = async (json: Record<string, unknown>) => {
    const { id, key } = (await admin.request('POST', '/admin/v1/keys', { json: { plan: 'enterprise', ...json } })).body;
    return { id: id as number, headers: bearer(key as string) };
  };
  return {
    customer,
    first: await key({ customerId: customer, perMinute: 1e6, perDay: 1e9 }),
    second: await key({ customerId: customer, perMinute: 1e6, perDay: 1e9 }),
    alone: await key({ perMinute: 3, perDay: 1e9 }),
  };
}
type Callers = Awaited<ReturnType<typeof seedCallers>>;

/** Traffic of every kind on the app: reads, a write, a path that is no operation, and (for the customerless key) refusals. */
async function traffic(app: FastifyInstance, { first, second, alone }: Callers) {
  for (const caller of [first, second]) {
    expect((await app.inject({ url: '/v1/pets?limit=1', headers: caller.headers })).statusCode).toBe(200);
    const created = await app.inject({ method: 'POST', url: '/v1/pets', headers: caller.headers, payload: { name: 'Rex', categoryId: 1 } });
    expect(created.statusCode).toBe(201);
    expect((await app.inject({ url: '/v1/nowhere', headers: caller.headers })).statusCode).toBe(404);
  }
  for (let i = 0; i < 2; i++) await app.inject({ url: '/v1/pets?limit=1', headers: alone.headers });
}

/** The usage record's rows of an hour, by operation, as the admin API reads them: of the customer, and of the customerless key. */
async function recordOf(admin: TestAdmin, callers: Callers, hour: number) {
  const range = `start=${new Date(hour).toISOString()}&end=${new Date(hour + HOUR).toISOString()}&groupBy=operation`;
  const rows = async (owner: string) =>
    (await admin.request('GET', `/admin/v1/usage?${owner}&${range}`)).body as Array<Record<string, unknown>>;
  // The event names its hour in `hour`; the rows' `start` is the same hour.
  const strip = (row: Record<string, unknown>) => Object.fromEntries(Object.entries(row).filter(([field]) => field !== 'start'));
  return {
    customer: (await rows(`customerId=${callers.customer}`)).map(strip),
    alone: (await rows(`keyId=${callers.alone.id}`)).map(strip),
  };
}

/** The events of an hour as the record's rows: the customer's and the key's, by operation, with what the record does not hold. */
function asRecord(events: UsageHourly[], callers: Callers, hour: number) {
  const of = (match: (event: UsageHourly) => boolean) =>
    events
      .filter((event) => event.data.hour === new Date(hour).toISOString() && match(event))
      .map(({ data: { operation, requests, units, refused } }) => ({ operation, requests, units, refused }))
      .sort((a, b) => String(a.operation).localeCompare(String(b.operation)));
  const byOperation = (rows: Array<Record<string, unknown>>) =>
    [...rows].sort((a, b) => String(a.operation).localeCompare(String(b.operation)));
  return {
    of: {
      customer: of((event) => event.data.customerId === callers.customer),
      alone: of((event) => event.data.keyId === callers.alone.id),
    },
    byOperation,
  };
}

describe('usage.hourly events', () => {
  const { closing, open } = closedAfterEach();

  /** Three instances on one database and clock, exporting to one receiver. */
  async function threeInstances(clock: TestClock) {
    const receiver = await startReceiver(() => 204);
    closing.push(receiver.close);
    const env = webhookEnv(receiver.url, { USAGE_EXPORT: 'hourly' });
    const a = await open(env, clock);
    const shared = { ...env, ...(a.databaseUrl && { DATABASE_URL: a.databaseUrl }) };
    const [b, c] = [await open(shared, clock), await open(shared, clock)];
    const admin = await openAdmin(a.app);
    closing.push(admin.close);
    return { receiver, instances: [a, b, c] as const, admin };
  }

  /** The passes an instance made so far, by outcome (usage_export_passes_total). */
  const passesOf = async (app: FastifyInstance) =>
    Object.fromEntries(
      (await app.metricsRegistry.getSingleMetric('usage_export_passes_total')!.get()).values.map(({ labels, value }) => [
        labels.outcome,
        value,
      ]),
    ) as Record<string, number | undefined>;
  const passCount = async (app: FastifyInstance) => Object.values(await passesOf(app)).reduce((sum: number, n) => sum + (n ?? 0), 0);

  test.skipIf(!POSTGRES_URL)(
    "two instances exporting, a third stopped midway: each hour's events hold the record's totals, each sent once; a late write sends a revision of the same id",
    async () => {
      const clock = testClock(H + 10 * MINUTE);
      const { receiver, instances, admin } = await threeInstances(clock);
      const [a, b, c] = instances;
      const callers = await seedCallers(admin);
      for (const t of [b, c])
        for (const caller of [callers.first, callers.second, callers.alone]) await waitForKeyOnApp(t.app, caller.headers);
      for (const t of instances) await traffic(t.app, callers);
      // The third instance stops midway: its last counts are written as it closes.
      await c.close();
      for (const t of [a, b]) await traffic(t.app, callers);
      await Promise.all([a.app.usage.flush(), b.app.usage.flush()]);

      clock.set(SENT_AT);
      const record = await recordOf(admin, callers, H);
      // The customer's: listPets, createPet and the unknown path; the key's: listPets, its refusals with it.
      const ours = () =>
        usageEvents(receiver.received).filter(({ data }) => data.customerId === callers.customer || data.keyId === callers.alone.id);
      await eventually(async () => ours().length === 4, 15_000);
      // Both instances look again once the hour is sent: neither sends it a second time.
      const looked = await Promise.all([passCount(a.app), passCount(b.app)]);
      await eventually(async () => (await passCount(a.app)) > looked[0] + 1 && (await passCount(b.app)) > looked[1] + 1, 15_000);
      const events = ours();
      const { of, byOperation } = asRecord(events, callers, H);
      expect(of.customer).toEqual(byOperation(record.customer));
      expect(of.alone).toEqual(byOperation(record.alone));
      console.log('events of the hour against the usage record:', JSON.stringify({ events: events.map((e) => e.data), record }));
      expect(events.every(({ data }) => data.revision === 1)).toBe(true);
      expect(new Set(events.map(({ id }) => id)).size).toBe(4);
      expect(events.find(({ data }) => data.keyId === callers.alone.id)).toMatchObject({
        subject: `key:${callers.alone.id}`,
        data: { customerId: null, externalId: null, operation: 'listPets', refused: { rateLimited: expect.any(Number) } },
      });
      expect(events.filter(({ subject }) => subject === 'cus_export')).toHaveLength(3);
      expect(events.some(({ data }) => (data.refused.rateLimited ?? 0) > 0)).toBe(true);
      // Each sent once: every row of the hour is marked, so no later pass of any instance sends it again.
      const unexported = await a.db.query('SELECT 1 FROM usage_hours WHERE NOT exported AND hour < $1', [new Date(H + HOUR)]);
      expect(unexported).toEqual([]);
      const outbox = await a.db.query<{ event_id: string; count: number }>(
        "SELECT event_id, count(*)::int AS count FROM webhook_deliveries WHERE type = 'usage.hourly' GROUP BY event_id",
      );
      expect(outbox.filter(({ event_id }) => events.some(({ id }) => id === event_id)).map(({ count }) => count)).toEqual([1, 1, 1, 1]);
      expect(receiver.received.filter(({ headers }) => events.some(({ id }) => id === headers['pet-store-event-id']))).toHaveLength(4);
      console.log('passes by outcome:', JSON.stringify({ a: await passesOf(a.app), b: await passesOf(b.app) }));

      // A late write: requests admitted in the hour sent (an instance's clock behind, catching up) are added to its rows.
      clock.set(H + 59 * MINUTE);
      await traffic(a.app, callers);
      await a.app.usage.flush();
      clock.set(SENT_AT + MINUTE);
      await eventually(async () => ours().length === 8, 15_000);
      const revised = ours().slice(4);
      const corrected = await recordOf(admin, callers, H);
      expect(asRecord(revised, callers, H).of.customer).toEqual(byOperation(corrected.customer));
      expect(asRecord(revised, callers, H).of.alone).toEqual(byOperation(corrected.alone));
      expect(revised.every(({ data }) => data.revision === 2)).toBe(true);
      expect(new Set(revised.map(({ id }) => id))).toEqual(new Set(events.map(({ id }) => id)));
      console.log('the revision:', JSON.stringify(revised.map(({ id, data }) => ({ id, ...data }))));
    },
    60_000,
  );

  /** One app exporting, its receiver and admin, and the test's callers' events as the receiver got them. */
  async function oneInstance(clock: TestClock, extra: Record<string, string> = {}) {
    const receiver = await startReceiver(() => 204);
    closing.push(receiver.close);
    const t = await open(webhookEnv(receiver.url, { USAGE_EXPORT: 'hourly', ...extra }), clock);
    const admin = await openAdmin(t.app);
    closing.push(admin.close);
    const callers = await seedCallers(admin);
    const ours = () => usageEvents(receiver.received).filter(({ data }) => data.customerId === callers.customer);
    return { receiver, t, admin, callers, ours };
  }

  const backfill = (admin: TestAdmin, json: Record<string, unknown>) => admin.request('POST', '/admin/v1/usage/exports', { json });

  test('a backfill sends the hours again with their ids: unchanged at their revision, the current hour so far, then its revision once closed', async () => {
    const clock = testClock(H + 10 * MINUTE);
    const { t, admin, callers, ours } = await oneInstance(clock);
    await traffic(t.app, callers);
    await t.app.usage.flush();
    clock.set(SENT_AT);
    await eventually(async () => ours().length === 3, 15_000);
    const sent = ours();

    const again = await backfill(admin, { start: iso(H), end: iso(H + HOUR), customerId: callers.customer });
    expect(again.status).toBe(202);
    expect(again.body).toEqual({ start: iso(H), end: iso(H + HOUR), customerId: callers.customer, events: 3 });
    await eventually(async () => ours().length === 6, 15_000);
    expect(ours().slice(3)).toEqual(expect.arrayContaining(sent));
    expect(ours().slice(3)).toHaveLength(3);

    // The current hour, not over: its totals so far, then (more traffic, the hour closed) the same ids at revision 2.
    await traffic(t.app, callers);
    await t.app.usage.flush();
    const current = await backfill(admin, { start: iso(H + HOUR), end: iso(H + 2 * HOUR), customerId: callers.customer });
    expect(current.body.events).toBe(3);
    await eventually(async () => ours().length === 9, 15_000);
    const soFar = ours().slice(6);
    expect(soFar.map(({ data }) => data.revision)).toEqual([1, 1, 1]);
    await traffic(t.app, callers);
    await t.app.usage.flush();
    clock.set(SENT_AT + HOUR);
    await eventually(async () => ours().length === 12, 15_000);
    const closed = ours().slice(9);
    expect(closed.map(({ data }) => data.revision)).toEqual([2, 2, 2]);
    expect(new Set(closed.map(({ id }) => id))).toEqual(new Set(soFar.map(({ id }) => id)));
    const record = await recordOf(admin, callers, H + HOUR);
    expect(asRecord(closed, callers, H + HOUR).of.customer).toEqual(asRecord([], callers, H).byOperation(record.customer));

    const trail = (await admin.request('GET', '/admin/v1/audit?limit=100')).body as Array<{ action: string; details: unknown }>;
    expect(trail.filter(({ action }) => action === 'usage.export').map(({ details }) => details)).toEqual([
      { start: iso(H + HOUR), end: iso(H + 2 * HOUR), customerId: callers.customer, events: 3 },
      { start: iso(H), end: iso(H + HOUR), customerId: callers.customer, events: 3 },
    ]);
  }, 60_000);

  test('a backfill of a bad range is refused, naming the field; a read token is refused; off, it is a 409', async () => {
    const clock = testClock(H + 10 * MINUTE);
    const { admin } = await oneInstance(clock);
    const refused = async (json: Record<string, unknown>) => {
      const { status, body } = await backfill(admin, json);
      expect({ status, code: body.code }).toEqual({ status: 400, code: 'bad_request' });
      return body.message as string;
    };
    expect(await refused({ start: iso(H + MINUTE), end: iso(H + HOUR) })).toMatch(/^body\/start must be a whole hour/);
    expect(await refused({ start: iso(H), end: iso(H) })).toMatch(/^body\/start must be before end/);
    expect(await refused({ start: iso(H - 32 * 24 * HOUR), end: iso(H) })).toMatch(/more than 31 days/);
    expect(await refused({ start: iso(H), end: iso(H + 2 * HOUR) })).toMatch(/past the end of the current hour/);
    expect(await refused({ start: iso(H), end: iso(H + HOUR), customerId: 999_999 })).toMatch(/names no customer/);
    expect(await refused({ start: iso(H), end: iso(H + HOUR), keyId: 1 })).toMatch(/known fields only/);
    const read = await admin.request('POST', '/admin/v1/usage/exports', {
      json: { start: iso(H), end: iso(H + HOUR) },
      headers: bearer(admin.read.token),
    });
    expect(read.status).toBe(403);

    const receiver = await startReceiver(() => 204);
    closing.push(receiver.close);
    const off = await open(webhookEnv(receiver.url), clock);
    const offAdmin = await openAdmin(off.app);
    closing.push(offAdmin.close);
    const conflict = await backfill(offAdmin, { start: iso(H), end: iso(H + HOUR) });
    expect(conflict.status).toBe(409);
    expect(conflict.body).toEqual({ code: 'conflict', status: 409, message: expect.stringMatching(/^USAGE_EXPORT is off/) });
  });

  test.skipIf(!POSTGRES_URL)(
    'a late write that commits while a pass waits for its row is in the totals the pass sends, as the row it marks holds it',
    async () => {
      // The instance's own passes stop before H (its clock stays in H): the test makes the pass of H itself.
      const { t, callers } = await oneInstance(testClock(H + 10 * MINUTE));
      await traffic(t.app, callers);
      await t.app.usage.flush();
      // A recorder's late write of one more listPets request to the first key's row, not committed yet.
      let written!: () => void;
      let commit!: () => void;
      const [holding, committed] = [
        new Promise<void>((resolve) => (written = resolve)),
        new Promise<void>((resolve) => (commit = resolve)),
      ];
      const late = t.db.transaction(async (tx) => {
        await tx.query(
          "UPDATE usage_hours SET requests = requests + 1, units = units + 1, exported = false WHERE hour = $1 AND key_id = $2 AND operation = 'listPets'",
          [new Date(H), callers.first.id],
        );
        written();
        await committed;
      });
      await holding;
      const pass = t.db.transaction((tx) => usageExports.exportMarked(new Date(H), new Date(H + HOUR), 5_000, tx));
      await eventually(async () => {
        const [waiting] = await t.db.query<{ n: number }>(
          "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()",
        );
        return waiting!.n > 0;
      });
      commit();
      await late;
      const sent = (await pass).find(({ customerId, operation }) => customerId === callers.customer && operation === 'listPets');
      const [record] = await t.db.query<{ requests: number }>(
        "SELECT sum(requests)::int AS requests FROM usage_hours WHERE customer_id = $1 AND hour = $2 AND operation = 'listPets'",
        [callers.customer, new Date(H)],
      );
      // Its row is marked: no later pass would send the request the totals missed.
      expect(await usageExports.anyUnmarked(new Date(H), new Date(H + HOUR), t.db)).toBe(false);
      expect(sent?.requests).toBe(record!.requests);
    },
  );

  test.skipIf(!POSTGRES_URL)(
    "the export's lock: a backfill waiting behind another never sends, at a higher revision, totals older than a pass sent meanwhile",
    async () => {
      // The instance's own passes stop before H (its clock stays in H): the test's exporters pass H, once each.
      const { t, admin, callers } = await oneInstance(testClock(H + 10 * MINUTE));
      await traffic(t.app, callers);
      await t.app.usage.flush();
      await eventually(async () => (await t.db.query('SELECT 1 FROM usage_export_start')).length > 0);
      const pass = async () => {
        const outcomes: PassOutcome[] = [];
        const options = { delayMs: 5 * MINUTE, now: () => SENT_AT, log: t.app.log, exported: async () => {} };
        const exporter = new UsageExporter(t.db, { ...options, onPass: (outcome) => outcomes.push(outcome) });
        exporter.start();
        await exporter.stop();
        return outcomes[0];
      };
      expect(await pass()).toBe('sent');

      // A backfill of the customer's hour, held open (the lock, and the customer's rows of what was sent) until released.
      let holding!: () => void;
      let release!: () => void;
      const [held, released] = [new Promise<void>((resolve) => (holding = resolve)), new Promise<void>((resolve) => (release = resolve))];
      const customers = createUsageExportRules(t.db, async () => {
        holding();
        await released;
      }).resend(
        { start: new Date(H), end: new Date(H + HOUR), customerId: callers.customer },
        { actor: { name: 'system:test', adminTokenId: null } },
      );
      await held;
      // A backfill of everyone's hour, waiting behind it (for the lock; without it, for the customer's rows of what was sent).
      const everyone = backfill(admin, { start: iso(H), end: iso(H + HOUR) });
      await eventually(async () => {
        const [waiting] = await t.db.query<{ n: number }>(
          "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()",
        );
        return waiting!.n > 0;
      });
      // A late write of the customerless key's hour, then a pass (which the lock keeps out).
      await t.db.query(
        "UPDATE usage_hours SET requests = requests + 1, units = units + 1, exported = false WHERE hour = $1 AND key_id = $2 AND operation = 'listPets'",
        [new Date(H), callers.alone.id],
      );
      expect(await pass()).toBe('locked');
      release();
      await customers;
      expect((await everyone).status).toBe(202);
      const [sent] = await t.db.query<{ requests: number }>(
        "SELECT requests::int FROM usage_exports WHERE hour = $1 AND subject = $2 AND operation = 'listPets'",
        [new Date(H), `key:${callers.alone.id}`],
      );
      const [record] = await t.db.query<{ requests: number }>(
        "SELECT requests::int FROM usage_hours WHERE hour = $1 AND key_id = $2 AND operation = 'listPets'",
        [new Date(H), callers.alone.id],
      );
      expect(sent!.requests).toBe(record!.requests);
    },
  );

  test('USAGE_EXPORT=hourly needs WEBHOOK_URL, where its events are sent', () => {
    expect(() => loadConfig({ USAGE_EXPORT: 'hourly' })).toThrow(/USAGE_EXPORT=hourly needs WEBHOOK_URL/);
    expect(() => loadConfig({ USAGE_EXPORT: 'daily' })).toThrow(/USAGE_EXPORT/);
  });
});

test("an hour's id is the name-based UUID (version 5) of its name, as RFC 9562 derives one", () => {
  // RFC 9562's example: www.example.com in the DNS namespace.
  const dns = Buffer.from('6ba7b8109dad11d180b400c04fd430c8', 'hex');
  expect(nameBasedUuid(dns, 'www.example.com')).toBe('2ed6657d-e927-568b-95e1-2665a8aea6a2');
  const namespace = Buffer.from('5e4f1a2c9b3d4e8fa6c7d8e9f0a1b2c3', 'hex');
  const hour = { hour: H, operation: 'listPets', customerId: 1, externalId: 'cus_1', keyId: null, revision: 3 };
  const counts = { requests: 1, units: 1, refused: { rateLimited: 0, concurrency: 0, credits: 0, banned: 0 } };
  const { event } = usageHourly({ ...hour, ...counts, subject: 'customer:1' }, 'pet-store');
  expect(event.id).toBe(nameBasedUuid(namespace, `customer:1/listPets/${iso(H)}`));
  // docs/admin-api.md's example event: customer 1's listPets of this hour.
  expect(event.id).toBe('a59dbb69-10fc-5414-af46-30e5e1d9af18');
});
