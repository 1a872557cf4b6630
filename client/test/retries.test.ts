// The client's retries of the service's own refusals, on PostgreSQL (a second connection holds what
// the service waits for; the embedded database has one connection only): a create whose first
// request is still in flight (409 idempotency_key_in_use), and a read refused by load shedding (503).
import { describe } from 'vitest';
import { describeAppTest, expect } from '../../test/support/fixtures.js';
import { POSTGRES_URL } from '../../test/support/databases.js';
import { eventually } from '../../test/support/eventually.js';
import { countPets } from '../../test/support/pets.js';
import type { Database, Queryable } from '../../src/platform/db/database.js';
import { PetStoreClient } from '../src/index.js';
import { recordingFetch } from './support.js';

const keyOf = (auth: { authorization: string }) => auth.authorization.slice('Bearer '.length);

function clientOf(port: number, auth: { authorization: string }) {
  const recorded = recordingFetch();
  const client = new PetStoreClient({ baseUrl: `http://127.0.0.1:${port}/v1`, apiKey: keyOf(auth), fetch: recorded.fetch, maxRetries: 10 });
  return { client, ...recorded };
}

/** Runs `hold` in a transaction on a connection of its own until the returned release is called. */
async function holdConnection(db: Database, hold: (tx: Queryable) => Promise<unknown>) {
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let held!: () => void;
  const holding = new Promise<void>((resolve) => (held = resolve));
  const done = db.transaction(async (tx) => {
    await hold(tx);
    held();
    await released;
  });
  await Promise.race([holding, done]);
  return async () => {
    release();
    await done;
  };
}

describe.skipIf(!POSTGRES_URL)('retries of the service’s refusals (PostgreSQL: set DATABASE_URL)', () => {
  describe('a create whose first request is still in flight', () => {
    const test = describeAppTest();

    test('the second caller with the same Idempotency-Key is told 409 idempotency_key_in_use, retries after Retry-After, and gets the first request’s pet', async ({
      t,
      port,
    }) => {
      const name = `In flight ${Date.now()}`;
      const first = clientOf(port, t.auth);
      const second = clientOf(port, t.auth);
      const idempotencyKey = `order-${Date.now()}`;
      // The first create waits for the pets table, its Idempotency-Key taken, until the lock is released.
      const release = await holdConnection(t.db, (tx) => tx.query('LOCK TABLE pets IN SHARE MODE'));
      let firstPet: Promise<unknown> | undefined;
      try {
        firstPet = first.client.createPet({ name, categoryId: 2 }, { idempotencyKey });
        // Awaited below; a failure before then must not go unhandled.
        firstPet.catch(() => {});
        await eventually(async () => {
          const [waiting] = await t.db.query<{ n: number }>(
            "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()",
          );
          return waiting!.n > 0;
        });
        const secondPet = second.client.createPet({ name, categoryId: 2 }, { idempotencyKey });
        await eventually(async () => second.count(409) > 0);
        await release();
        expect(await secondPet).toEqual(await firstPet);
      } finally {
        await release();
      }

      expect(first.statuses()).toEqual([201]);
      const statuses = second.statuses();
      expect(statuses.at(-1)).toBe(201);
      expect(statuses.slice(0, -1).every((status) => status === 409)).toBe(true);
      const [refused, replayed] = [second.exchanges[0]!, second.exchanges.at(-1)!];
      expect(refused.headers!.get('retry-after')).toBe('1');
      expect(replayed.headers!.get('idempotent-replayed')).toBe('true');
      expect(replayed.sentAt - refused.sentAt).toBeGreaterThanOrEqual(1_000);
      expect(second.exchanges.every((exchange) => exchange.requestHeaders.get('idempotency-key') === idempotencyKey)).toBe(true);
      expect(await countPets(t.db, name)).toBe(1);
      console.log(`409 in flight: the second caller sent ${statuses.join(', ')}; one pet`);
    });
  });

  describe('a read refused by load shedding', () => {
    // One connection, and shedding once 3 requests wait for it; no pets cache, so every read needs it.
    const test = describeAppTest({ env: { DB_POOL_SIZE: '1', LOAD_SHED_POOL_WAITING: '3', PETS_CACHE_MAX_BYTES: '0' } });

    test('a 503 is retried after its Retry-After, and the retry is answered', async ({ t, port }) => {
      const { client, exchanges, statuses } = clientOf(port, t.auth);
      const release = await holdConnection(t.db, (tx) => tx.query('SELECT 1'));
      let queued: Array<Promise<unknown>> = [];
      try {
        queued = Array.from({ length: 6 }, (_, i) => t.app.inject({ url: `/v1/pets?limit=${i + 1}`, headers: t.auth }));
        await eventually(async () => t.app.isUnderPressure(), 5_000);
        const listing = client.listPets({ limit: 5 });
        await eventually(async () => exchanges.some((exchange) => exchange.status === 503), 5_000);
        await release();
        await Promise.all(queued);
        expect(Array.isArray(await listing)).toBe(true);
      } finally {
        await release();
        await Promise.all(queued);
      }

      expect(statuses().at(-1)).toBe(200);
      expect(
        statuses()
          .slice(0, -1)
          .every((status) => status === 503),
      ).toBe(true);
      const [shed, answered] = [exchanges[0]!, exchanges.at(-1)!];
      expect(shed.headers!.get('retry-after')).toBe('5');
      expect(answered.sentAt - shed.sentAt).toBeGreaterThanOrEqual(5_000);
      console.log(
        `load shedding: the client sent ${statuses().join(', ')}, retrying ${((answered.sentAt - shed.sentAt) / 1000).toFixed(1)} s later`,
      );
    }, 30_000);
  });
});
