import { randomUUID } from 'node:crypto';
import { test as base, expect } from 'vitest';
import { encodeCursor } from '../../src/platform/pagination.js';
import { buildTestApp, type TestApp } from '../support/app.js';
import { createScratchDatabase } from '../../harness/databases.js';
import { POSTGRES_URL } from '../support/databases.js';
import { eventually } from '../support/eventually.js';
import { describeNeeding, NEEDS, startPgBouncer } from '../support/engines/index.js';
import { bearer } from '../support/keys.js';
import { sqlAt, workerPool } from '../support/scale.js';

// The service behind a transaction pooler (issue #20): two instances through a real PgBouncer in
// transaction mode, with unnamed statements and LISTEN on a direct session. PostgreSQL suite only.

const NEW_PET = { name: 'Pooled', categoryId: 1 };
const json = (authorization: string) => ({ ...bearer(authorization.slice('Bearer '.length)), 'content-type': 'application/json' });

const test = base
  // eslint-disable-next-line no-empty-pattern -- vitest reads a fixture's dependencies from this pattern
  .extend('bouncer', { scope: 'file' }, async ({}, { onCleanup }) => {
    const server = new URL(POSTGRES_URL!);
    const bouncer = await startPgBouncer({
      upstream: { host: server.hostname, port: Number(server.port) },
      mode: 'transaction',
      poolSize: 4,
    });
    onCleanup(() => bouncer.close());
    return bouncer;
  })
  // eslint-disable-next-line no-empty-pattern -- vitest reads a fixture's dependencies from this pattern
  .extend('direct', { scope: 'file' }, async ({}, { onCleanup }) => {
    const direct = await createScratchDatabase(POSTGRES_URL!);
    onCleanup(() => direct.drop());
    return direct;
  })
  .extend('instances', { scope: 'file' }, async ({ bouncer, direct }, { onCleanup }) => {
    const env = {
      DATABASE_URL: bouncer.url(new URL(direct.url).pathname.slice(1)),
      DATABASE_LISTEN_URL: direct.url,
      DATABASE_PREPARED_STATEMENTS: 'false',
    };
    const a = await buildTestApp(env);
    const b = await buildTestApp(env);
    onCleanup(async () => void (await Promise.all([b.close(), a.close()])));
    return [a, b] as const;
  })
  // eslint-disable-next-line no-empty-pattern -- vitest reads a fixture's dependencies from this pattern
  .extend('workers', async ({}, { onCleanup }) => {
    const pool = workerPool();
    onCleanup(pool.stopAll);
    return pool.start;
  });

describeNeeding(NEEDS.postgresUrl, NEEDS.pgbouncer)('two instances through PgBouncer in transaction mode', () => {
  test('answers a mixed workload on both instances without a 5xx', async ({ instances: [a, b], workers }) => {
    const statuses: number[] = [];
    const stop = workers(8, async (worker, round) => {
      const t = worker % 2 ? a : b;
      const response =
        round % 3 === 0
          ? await t.app.inject({ method: 'POST', url: '/v1/pets', headers: json(t.auth.authorization), payload: NEW_PET })
          : round % 3 === 1
            ? await t.app.inject({ url: '/v1/pets?limit=20', headers: t.auth })
            : await t.app.inject({ url: `/v1/pets/${1 + (round % 50)}`, headers: t.auth });
      statuses.push(response.statusCode);
    });
    await eventually(async () => statuses.length >= 300, 30_000);
    await stop();
    console.log(`transaction pooler: ${statuses.length} requests, ${statuses.filter((status) => status >= 500).length} x 5xx`);
    expect(statuses.filter((status) => status >= 500)).toEqual([]);
  });

  test('refuses a revoked key on both instances within a second', async ({ instances: [a, b] }) => {
    const { id, key } = await a.app.apiKeysRepository.create({ plan: 'pro', name: 'to revoke' });
    for (const t of [a, b]) {
      await eventually(async () => (await t.app.inject({ url: '/v1/pets?limit=1', headers: bearer(key) })).statusCode === 200);
    }
    await a.app.keyRules.revoke(id);
    const revokedAt = Date.now();
    await eventually(async () => {
      const answers = await Promise.all([a, b].map((t) => t.app.inject({ url: '/v1/pets?limit=1', headers: bearer(key) })));
      return answers.every((answer) => answer.statusCode === 401);
    }, 5_000);
    const tookMs = Date.now() - revokedAt;
    console.log(`transaction pooler: a revoked key refused on both instances after ${tookMs} ms`);
    expect(tookMs).toBeLessThan(1_000);
  });

  test("lists another instance's create within the pets cache's staleness bound (1 s)", async ({ instances: [a, b] }) => {
    const create = async (t: TestApp) =>
      (await t.app.inject({ method: 'POST', url: '/v1/pets', headers: json(t.auth.authorization), payload: NEW_PET })).json<{
        id: number;
      }>().id;
    // b reads (and caches) the end of the listing first: only a notice or the expiry can show it the new pet.
    const tail = `/v1/pets?limit=100&cursor=${encodeCursor(await create(a), undefined)}`;
    const listed = async () => (await b.app.inject({ url: tail, headers: b.auth })).json<Array<{ id: number }>>().map((pet) => pet.id);
    expect(await listed()).toEqual([]);
    const id = await create(a);
    const createdAt = Date.now();
    await eventually(async () => (await listed()).includes(id), 5_000);
    const tookMs = Date.now() - createdAt;
    console.log(`transaction pooler: another instance's create listed after ${tookMs} ms`);
    expect(tookMs).toBeLessThan(1_000);
  });

  test('makes one pet of 20 concurrent POSTs with one Idempotency-Key across both instances', async ({ instances: [a, b], direct }) => {
    const key = randomUUID();
    const name = `Once ${key.slice(0, 8)}`;
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) => {
        // One client (one API key, whose scope the key is in), its retries spread over both instances.
        const t = i % 2 ? a : b;
        return t.app.inject({
          method: 'POST',
          url: '/v1/pets',
          headers: { ...json(a.auth.authorization), 'idempotency-key': key },
          payload: { name, categoryId: 1 },
        });
      }),
    );
    expect(answers.filter((answer) => answer.statusCode !== 201 && answer.statusCode !== 409)).toEqual([]);
    expect(await sqlAt<{ n: number }>(direct.url, 'SELECT count(*)::int AS n FROM pets WHERE name = $1', [name])).toEqual([{ n: 1 }]);
  });
});
