import { test as base, expect } from 'vitest';
import { DatabaseUnavailableError } from '../../src/platform/db/errors.js';
import { encodeCursor } from '../../src/platform/pagination.js';
import { buildTestApp } from '../support/app.js';
import { eventually } from '../support/eventually.js';
import { describeNeeding, NEEDS, startPgBouncer, startPrimaryWithStandby } from '../support/engines/index.js';
import { databaseTest } from '../support/fixtures.js';
import { bearer } from '../support/keys.js';
import { sqlAt, workerPool } from '../support/scale.js';
import { sleep } from '../support/time.js';

// PostgreSQL failover (issue #20): a planned switchover from a primary to its streaming standby
// behind one PgBouncer endpoint an operator moves, and a connection lost in a transaction. Real
// servers on loopback; PostgreSQL suite only.

const json = (authorization: string) => ({ ...bearer(authorization.slice('Bearer '.length)), 'content-type': 'application/json' });

const test = base
  // eslint-disable-next-line no-empty-pattern -- vitest reads a fixture's dependencies from this pattern
  .extend('pair', { scope: 'file' }, async ({}, { onCleanup }) => {
    const pair = await startPrimaryWithStandby();
    onCleanup(() => pair.close());
    await sqlAt(pair.primary.url(), 'CREATE DATABASE pets');
    return pair;
  })
  .extend('bouncer', { scope: 'file' }, async ({ pair }, { onCleanup }) => {
    const bouncer = await startPgBouncer({ upstream: { host: '127.0.0.1', port: pair.primary.port }, mode: 'session', poolSize: 10 });
    onCleanup(() => bouncer.close());
    return bouncer;
  })
  .extend('t', { scope: 'file' }, async ({ bouncer }, { onCleanup }) => {
    const t = await buildTestApp({ DATABASE_URL: bouncer.url('pets') });
    onCleanup(() => t.close());
    return t;
  })
  // eslint-disable-next-line no-empty-pattern -- vitest reads a fixture's dependencies from this pattern
  .extend('workers', async ({}, { onCleanup }) => {
    const pool = workerPool();
    onCleanup(pool.stopAll);
    return pool.start;
  });

describeNeeding(
  NEEDS.postgresUrl,
  NEEDS.pgbouncer,
  NEEDS.privatePostgres,
)('a planned switchover to the standby behind one PgBouncer endpoint', () => {
  test('loses no acknowledged create, creates again within 5 s of the new primary, and lists its rows within the staleness bound', async ({
    pair,
    bouncer,
    t,
    workers,
  }) => {
    // Each create has a key and a name of its own; a client retries a refused one with the same key, as it should.
    const acknowledged: Array<{ id: number; name: string; at: number }> = [];
    const refusals: number[] = [];
    const stop = workers(2, async (worker, round) => {
      const name = `Switch-${worker}-${round}`;
      const headers = { ...json(t.auth.authorization), 'idempotency-key': name };
      for (;;) {
        const answer = await t.app.inject({ method: 'POST', url: '/v1/pets', headers, payload: { name, categoryId: 1 } });
        if (answer.statusCode === 201) {
          acknowledged.push({ id: answer.json<{ id: number }>().id, name, at: Date.now() });
          return sleep(50).then(() => undefined);
        }
        refusals.push(answer.statusCode);
        if (answer.statusCode !== 503) return;
        await sleep(200);
      }
    });
    await eventually(async () => acknowledged.length >= 10, 15_000);
    await pair.waitForReplay();
    await pair.stopPrimary();
    await pair.promote(30_000);
    const acceptingAt = Date.now();
    await bouncer.pointAt({ host: '127.0.0.1', port: pair.standby.port });
    const firstAfter = await eventually(async () => acknowledged.some((create) => create.at > acceptingAt), 15_000);
    await eventually(async () => acknowledged.filter((create) => create.at > acceptingAt).length >= 10, 15_000);
    await stop();

    const names = acknowledged.map((create) => create.name);
    const stored = await sqlAt<{ id: number; name: string }>(
      pair.standby.url('pets'),
      'SELECT id::int, name FROM pets WHERE name = ANY($1)',
      [names],
    );
    console.log(
      `switchover: ${acknowledged.length} creates acknowledged, refusals meanwhile ${JSON.stringify(refusals)}; ` +
        `201s again ${firstAfter} ms after the new primary accepted connections`,
    );
    expect(stored.map((row) => row.name).sort()).toEqual([...names].sort());
    expect(stored.map((row) => row.id).sort()).toEqual(acknowledged.map((create) => create.id).sort());
    expect(refusals.filter((status) => status !== 503)).toEqual([]);
    expect(firstAfter).toBeLessThan(5_000);

    // An operator's row on the new primary: listed within the bound once the cache's page of it expires or a notice lands.
    const [row] = await sqlAt<{ id: number }>(
      pair.standby.url('pets'),
      "INSERT INTO pets (name, category_id) VALUES ('Operator', 1) RETURNING id::int",
    );
    const insertedAt = Date.now();
    await eventually(async () => {
      const page = await t.app.inject({ url: `/v1/pets?limit=1&cursor=${encodeCursor(row!.id - 1, undefined)}`, headers: t.auth });
      return page.json<Array<{ id: number }>>().some((pet) => pet.id === row!.id);
    }, 5_000);
    const listedMs = Date.now() - insertedAt;
    console.log(`switchover: an operator's row on the new primary listed after ${listedMs} ms`);
    expect(listedMs).toBeLessThan(1_200);
  });
});

const withDatabase = databaseTest();

describeNeeding(NEEDS.postgresUrl)('a connection lost between two statements of a transaction', () => {
  withDatabase('fails the transaction as unavailable instead of crashing the process', async ({ database }) => {
    const outcome = database.db.transaction(async (tx) => {
      const [backend] = await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
      // Ended from outside while the transaction waits between statements, as a failover ends it.
      await sqlAt(database.url!, 'SELECT pg_terminate_backend($1)', [backend!.pid]);
      await eventually(
        async () => (await sqlAt(database.url!, 'SELECT 1 FROM pg_stat_activity WHERE pid = $1', [backend!.pid])).length === 0,
      );
      await tx.query('SELECT 1');
    });
    await expect(outcome).rejects.toThrow(DatabaseUnavailableError);
    expect(await database.db.query<{ one: number }>('SELECT 1 AS one')).toEqual([{ one: 1 }]);
  });
});
