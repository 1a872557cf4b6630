import { describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { usageThreshold } from '../../src/webhooks/events.js';
import { createWebhookDeliveriesRepository } from '../../src/webhooks/repository.js';
import type { TestApp } from '../support/app.js';
import { POSTGRES_URL } from '../support/databases.js';
import { eventually } from '../support/eventually.js';
import { freePort } from '../../harness/free-port.js';
import { DAY, MINUTE, T0, testClock } from '../support/time.js';
import { closedAfterEach, DAY_CROSSING, webhookEnv } from '../support/webhooks.js';

// The outbox's upkeep: deliveries past their retention deleted, and the pending count.

/** Adds `count` deliveries in `state`, recorded at `recordedAt` (the outbox's own clock is the database's), labelled in their dedupe keys. */
async function addDeliveries(
  app: FastifyInstance,
  { state, count, recordedAt, label }: { state: string; count: number; recordedAt: number; label: string },
) {
  // A pending one's next attempt is far off, so that no sender attempts it meanwhile.
  await app.db.query(
    `INSERT INTO webhook_deliveries (event_id, type, dedupe_key, body, state, created_at, next_attempt_at)
     SELECT gen_random_uuid(), 'usage.threshold', $1 || i, '{}', $2, $3, now() + interval '1 day' FROM generate_series(1, $4::int) AS i`,
    [`${label} `, state, new Date(recordedAt), count],
  );
}

const dedupeKeysOf = async (app: FastifyInstance) =>
  (await app.db.query<{ dedupe_key: string }>('SELECT dedupe_key FROM webhook_deliveries ORDER BY dedupe_key')).map(
    (row) => row.dedupe_key,
  );

/** The deliveries each prune deleted, as the app logged them. */
const prunedOf = (t: TestApp) =>
  t.logs
    .entries()
    .filter((entry) => entry.msg === 'webhooks: deliveries past their retention deleted')
    .map((entry) => entry.pruned as number);

describe('the webhook outbox', () => {
  const { open } = closedAfterEach();

  it('delivered and failed deliveries are deleted once WEBHOOK_RETENTION_DAYS have passed on the clock, in batches; pending ones never', async () => {
    const clock = testClock(T0);
    const t = await open(webhookEnv(`http://127.0.0.1:${await freePort()}/hooks`, { WEBHOOK_RETENTION_DAYS: '7' }), clock);
    // More than one batch settled a minute before T0; beside them an old pending one, and one delivered a minute after T0.
    await addDeliveries(t.app, { state: 'delivered', count: 700, recordedAt: T0 - MINUTE, label: 'old delivered' });
    await addDeliveries(t.app, { state: 'failed', count: 500, recordedAt: T0 - MINUTE, label: 'old failed' });
    await addDeliveries(t.app, { state: 'pending', count: 1, recordedAt: T0 - MINUTE, label: 'old pending' });
    await addDeliveries(t.app, { state: 'delivered', count: 1, recordedAt: T0 + MINUTE, label: 'young delivered' });

    clock.advance(7 * DAY);
    await eventually(async () => prunedOf(t).length === 1, 10_000);
    expect(prunedOf(t)).toEqual([1_200]);
    expect(await dedupeKeysOf(t.app)).toEqual(['old pending 1', 'young delivered 1']);

    // A minute on (the next prune), the young one's seven days are over too.
    clock.advance(2 * MINUTE);
    await eventually(async () => prunedOf(t).length === 2, 10_000);
    expect(prunedOf(t)).toEqual([1_200, 1]);
    expect(await dedupeKeysOf(t.app)).toEqual(['old pending 1']);
  });

  it('two instances deleting past the retention at once delete each delivery once', { skip: !POSTGRES_URL }, async () => {
    const clock = testClock(T0);
    const url = `http://127.0.0.1:${await freePort()}/hooks`;
    const a = await open(webhookEnv(url), clock);
    const b = await open({ ...webhookEnv(url), DATABASE_URL: a.databaseUrl! }, clock);
    await addDeliveries(a.app, { state: 'delivered', count: 3_000, recordedAt: T0 - MINUTE, label: 'old delivered' });
    await addDeliveries(a.app, { state: 'pending', count: 1, recordedAt: T0 - MINUTE, label: 'old pending' });

    clock.advance(30 * DAY);
    await eventually(async () => [...prunedOf(a), ...prunedOf(b)].reduce((sum, pruned) => sum + pruned, 0) === 3_000, 10_000);
    expect(await dedupeKeysOf(a.app)).toEqual(['old pending 1']);
    expect([...a.logs.entries(), ...b.logs.entries()].filter((entry) => Number(entry.level) >= 40)).toEqual([]);
  });

  it('the pending count keeps its last value, and the scrape its other metrics, while the count cannot be read', async () => {
    const url = `http://127.0.0.1:${await freePort()}/hooks`;
    const clock = testClock(T0);
    const t = await open(webhookEnv(url), clock);
    await createWebhookDeliveriesRepository(t.app.db).record(usageThreshold(DAY_CROSSING, clock.now()));
    expect(await t.app.metricsRegistry.metrics()).toContain('webhook_deliveries_pending 1');

    await t.app.db.query('DROP TABLE webhook_deliveries');
    const scraped = await t.app.metricsRegistry.metrics();
    expect(scraped).toContain('webhook_deliveries_pending 1');
    expect(scraped).toContain('http_request_duration_seconds');
    expect(t.logs.entries().some((entry) => entry.msg === 'webhooks: counting the pending deliveries failed')).toBe(true);
  });
});
