import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { usageThreshold } from '../../src/webhooks/events.js';
import { createWebhookDeliveriesRepository } from '../../src/webhooks/repository.js';
import { FIRST_RETRY_MS } from '../../src/webhooks/sender.js';
import { openAdmin } from '../support/admin.js';
import { buildTestApp, type TestApp } from '../support/app.js';
import { POSTGRES_URL } from '../support/databases.js';
import { eventually } from '../support/eventually.js';
import { freePort } from '../../harness/free-port.js';
import { keyInFreshWindows } from '../support/keys.js';
import { T0, testClock } from '../support/time.js';
import {
  closedAfterEach,
  crossMinute,
  deliveriesOf,
  depsOf,
  outcomesOf,
  startReceiver,
  verified,
  webhookEnv,
  DAY_CROSSING,
} from '../support/webhooks.js';
import { minuteAndDay } from '../../src/plans/limits.js';

// Delivery attempts: kept across a restart, retried with backoff, and put back by an operator.

describe('webhook deliveries', () => {
  const { closing, open } = closedAfterEach();
  /** An app delivering to a receiver that answers `answer`, with its admin API and the outbox's repository; closed after the test. */
  const withAdmin = async (answer: () => number | Promise<number>) => {
    const receiver = await startReceiver(answer);
    closing.push(receiver.close);
    const clock = testClock(T0);
    const t = await open(webhookEnv(receiver.url), clock);
    const admin = await openAdmin(t.app);
    closing.push(admin.close);
    return { receiver, clock, t, admin, deliveries: createWebhookDeliveriesRepository(t.app.db) };
  };

  it('a restart between the crossing and the delivery loses nothing: the next instance on the database delivers it', async () => {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}/hooks`;
    const clock = testClock(T0);
    const dir = POSTGRES_URL ? undefined : await mkdtemp(join(tmpdir(), 'pets-webhooks-'));
    if (dir) closing.push(() => rm(dir, { recursive: true, force: true }));
    const first: TestApp = await buildTestApp({ ...webhookEnv(url), ...(dir && { DATA_DIR: dir }) }, depsOf(clock));
    const { headers } = await keyInFreshWindows(first.app, clock, { plan: 'enterprise', limits: minuteAndDay(2, 100) });
    await crossMinute(first.app, headers);
    // Nothing listens at the URL yet: the first attempt fails, and the event waits in the outbox.
    await eventually(async () => (await deliveriesOf(first.app))[0]?.last_error != null);
    expect((await deliveriesOf(first.app))[0]?.last_error).toBe(`no answer: connect ECONNREFUSED 127.0.0.1:${port}`);
    await first.app.close();

    const receiver = await startReceiver(() => 200, port);
    closing.push(receiver.close);
    const second = await open({ ...webhookEnv(url), ...(dir ? { DATA_DIR: dir } : { DATABASE_URL: first.databaseUrl! }) }, clock);
    if (!dir) closing.push(() => first.close().catch(() => {}));
    await receiver.arrived(1);
    expect(JSON.parse(receiver.received[0]!.body)).toMatchObject({ type: 'usage.threshold', data: { used: 2, threshold: 100 } });
    expect(verified(receiver.received[0]!)).toBe(true);
    await eventually(async () => (await deliveriesOf(second.app))[0]?.state === 'delivered');
  });

  it('a ban is a key.banned event; the admin API lists deliveries by state and puts a failed one back', async () => {
    let accept = false;
    const receiver = await startReceiver(() => (accept ? 200 : 503));
    closing.push(receiver.close);
    const clock = testClock(T0);
    const t = await open(webhookEnv(receiver.url, { RATE_LIMIT_BAN_THRESHOLD: '1' }), clock);
    const admin = await openAdmin(t.app);
    closing.push(admin.close);
    const { headers, quotaId } = await keyInFreshWindows(t.app, clock, { plan: 'enterprise', limits: minuteAndDay(2, 100) });
    await crossMinute(t.app, headers);
    for (let i = 0; i < 2; i++) expect((await t.app.inject({ url: '/v1/pets?limit=1', headers })).statusCode).toBe(429);
    await eventually(async () => (await deliveriesOf(t.app)).length === 2 && receiver.received.length >= 2);
    // Failing for good: the 24 hours are over.
    await t.app.db.query("UPDATE webhook_deliveries SET retry_until = now() WHERE state = 'pending'");
    await eventually(async () => (await deliveriesOf(t.app)).every((delivery) => delivery.state === 'failed'), 10_000);

    const failed = await admin.request('GET', '/admin/v1/webhook-deliveries?state=failed');
    expect(failed.status).toBe(200);
    // Newest first; the two were recorded without waiting for each other, so either may be newer.
    const ids = failed.body.map((delivery: { id: number }) => delivery.id);
    expect(ids).toEqual([...ids].sort((a, b) => b - a));
    expect(failed.body.map((delivery: { type: string }) => delivery.type).sort()).toEqual(['key.banned', 'usage.threshold']);
    const banned = failed.body.find((delivery: { type: string }) => delivery.type === 'key.banned');
    expect(banned).toMatchObject({ state: 'failed', lastStatus: 503, lastError: 'HTTP 503', nextAttemptAt: null });
    expect(banned.data).toEqual({ keyId: quotaId, quotaId, bannedUntil: new Date(clock.now() + 900_000).toISOString() });
    expect((await admin.request('GET', '/admin/v1/webhook-deliveries?state=delivered')).body).toEqual([]);
    expect((await admin.request('GET', '/admin/v1/webhook-deliveries?state=lost')).status).toBe(400);

    accept = true;
    const retried = await admin.request('POST', `/admin/v1/webhook-deliveries/${banned.id}/retry`);
    expect(retried.status).toBe(200);
    expect(retried.body).toMatchObject({ id: banned.id, state: 'pending' });
    await eventually(async () => (await admin.request('GET', `/admin/v1/webhook-deliveries?state=delivered`)).body.length === 1);
    const again = await admin.request('POST', `/admin/v1/webhook-deliveries/${banned.id}/retry`);
    expect(again.status).toBe(409);
    expect(again.body).toMatchObject({
      code: 'conflict',
      message: `Webhook delivery ${banned.id} was delivered; only a failed or pending one is retried`,
    });
    expect((await admin.request('POST', '/admin/v1/webhook-deliveries/999999/retry')).body.code).toBe('not_found');
    const audit = await admin.request('GET', '/admin/v1/audit?limit=1');
    expect(audit.body[0]).toMatchObject({ action: 'webhook_delivery.retry', details: { deliveryId: banned.id } });
  });

  it('a retry brings a pending delivery waiting out a long backoff forward, and leaves an attempt in flight alone', async () => {
    let answer: Promise<number> | number = 500;
    const { receiver, clock, t, admin, deliveries } = await withAdmin(() => answer);
    expect(await deliveries.record(usageThreshold(DAY_CROSSING, clock.now()))).toBe(true);
    await eventually(async () => (await deliveriesOf(t.app))[0]?.last_error === 'HTTP 500');
    // As if many attempts had failed: the next one an hour away.
    await t.app.db.query("UPDATE webhook_deliveries SET next_attempt_at = now() + interval '1 hour'");
    const waiting = (await deliveriesOf(t.app))[0]!;
    const attempted = receiver.received.length;

    answer = 200;
    const retried = await admin.request('POST', `/admin/v1/webhook-deliveries/${waiting.id}/retry`);
    expect(retried.status).toBe(200);
    expect(retried.body).toMatchObject({ id: waiting.id, state: 'pending' });
    expect(Date.parse(retried.body.nextAttemptAt)).toBeLessThanOrEqual(Date.now() + 1_000);
    await eventually(async () => (await deliveriesOf(t.app))[0]?.state === 'delivered');
    expect(receiver.received).toHaveLength(attempted + 1);

    // The receiver holds the next event's attempt: a retry meanwhile keeps its claim, so no second attempt starts.
    let release!: (status: number) => void;
    answer = new Promise((resolve) => (release = resolve));
    expect(await deliveries.record(usageThreshold({ ...DAY_CROSSING, threshold: 100, used: 100 }, clock.now()))).toBe(true);
    await receiver.arrived(attempted + 2);
    const inFlight = (await deliveriesOf(t.app))[1]!;
    const whileInFlight = await admin.request('POST', `/admin/v1/webhook-deliveries/${inFlight.id}/retry`);
    expect(whileInFlight.status).toBe(200);
    expect(Date.parse(whileInFlight.body.nextAttemptAt)).toBeGreaterThan(Date.now() + 20_000);
    release(200);
    await eventually(async () => (await deliveriesOf(t.app))[1]?.state === 'delivered');
    expect(receiver.received).toHaveLength(attempted + 2);
  });

  it('a failed attempt is tried again after 5 s (docs/admin-api.md), then after twice as long, each with up to 20% jitter', async () => {
    const receiver = await startReceiver(() => 500);
    closing.push(receiver.close);
    const clock = testClock(T0);
    // The production wait, not the suite's shorter one.
    const t = await buildTestApp(webhookEnv(receiver.url), { now: clock.now });
    closing.push(() => t.close());
    const deliveries = createWebhookDeliveriesRepository(t.app.db);
    expect(await deliveries.record(usageThreshold(DAY_CROSSING, clock.now()))).toBe(true);
    const { id } = (await deliveriesOf(t.app))[0]!;

    /**
     * The wait the sender scheduled after its `attempts`th attempt failed, as far as the outbox
     * tells it: at least the time from the attempt's start to the next attempt, at most the time
     * from when the failure was seen to it (both bounds hold however slow the attempt was).
     */
    const scheduledWait = async (attempts: number) => {
      await eventually(async () => (await outcomesOf(t.app)).retried === attempts);
      const seenAt = Date.now();
      const delivery = (await deliveries.get(id))!;
      expect(delivery).toMatchObject({ state: 'pending', attempts, lastStatus: 500 });
      const nextAttemptAt = Date.parse(delivery.nextAttemptAt!);
      return { atLeast: nextAttemptAt - Date.parse(delivery.lastAttemptAt!), atMost: nextAttemptAt - seenAt };
    };
    // Timestamps are read to the millisecond: 1 ms either way.
    const first = await scheduledWait(1);
    expect(first.atLeast).toBeGreaterThanOrEqual(FIRST_RETRY_MS - 1);
    expect(first.atMost).toBeLessThanOrEqual(1.2 * FIRST_RETRY_MS + 1);

    // Due now rather than in 5 s: its second attempt fails too.
    await t.app.db.query('UPDATE webhook_deliveries SET next_attempt_at = now() WHERE id = $1', [id]);
    const second = await scheduledWait(2);
    expect(second.atLeast).toBeGreaterThanOrEqual(2 * FIRST_RETRY_MS - 1);
    expect(second.atMost).toBeLessThanOrEqual(2.4 * FIRST_RETRY_MS + 1);
  });

  it("an operator's retry gives a failed delivery 24 hours more: failing again, it is tried again, not left failed", async () => {
    const { clock, t, admin, deliveries } = await withAdmin(() => 500);
    expect(await deliveries.record(usageThreshold(DAY_CROSSING, clock.now()))).toBe(true);
    await eventually(async () => (await outcomesOf(t.app)).retried === 1);
    // Its 24 hours over: the next attempt fails it for good.
    await t.app.db.query('UPDATE webhook_deliveries SET retry_until = now()');
    await eventually(async () => (await outcomesOf(t.app)).failed === 1);
    const failed = (await deliveriesOf(t.app))[0]!;
    expect(failed.state).toBe('failed');

    expect((await admin.request('POST', `/admin/v1/webhook-deliveries/${failed.id}/retry`)).status).toBe(200);
    // The retried attempt's outcome, whichever it is.
    await eventually(async () => {
      const { retried, failed } = await outcomesOf(t.app);
      return retried + failed === 3;
    });
    expect(await outcomesOf(t.app)).toEqual({ delivered: 0, retried: 2, failed: 1 });
    expect(await deliveries.get(failed.id)).toMatchObject({ state: 'pending', attempts: 3, lastStatus: 500 });
  });
});
