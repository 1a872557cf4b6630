import pino from 'pino';
import { test as base, expect } from 'vitest';
import { migrate } from '../../src/platform/db/migrate.js';
import { createPostgresDatabase } from '../../src/platform/db/postgres.js';
import { createReplicaReads, replicaName, type ReplicaOptions } from '../../src/platform/db/replicas.js';
import { parseLsn } from '../../src/platform/db/wal-position.js';
import { buildMetricsServer } from '../../src/platform/observability/metrics-server.js';
import { encodeCursor } from '../../src/platform/pagination.js';
import { buildTestApp, type TestApp } from '../support/app.js';
import { eventually } from '../support/eventually.js';
import { describeNeeding, NEEDS, startPrimaryWithStandby, type PrimaryWithStandby } from '../support/engines/index.js';
import { cleanupStack } from '../support/fixtures.js';
import { bearer } from '../support/keys.js';
import { sqlAt } from '../support/scale.js';
import { sleep } from '../support/time.js';

// Reads of pets on a streaming standby (DATABASE_REPLICA_URLS): most reads leave the primary,
// no consistency promise is given up with the standby applying each commit 500 ms late, and a
// standby stopped under load costs no request. Real servers on loopback; PostgreSQL suite only.

const SEEDED = 300;

const json = (authorization: string) => ({ ...bearer(authorization.slice('Bearer '.length)), 'content-type': 'application/json' });

const replicaApp = (pair: PrimaryWithStandby, env: Record<string, string> = {}) =>
  buildTestApp({ DATABASE_URL: pair.primary.url('pets'), DATABASE_REPLICA_URLS: pair.standby.url('pets'), ...env });

const readsOf = (t: TestApp) => t.app.replicaReads!.stats().reads;

/** Resolves once the app takes reads from the standby: it is reachable, and has replayed every change the app knows of. */
const replicaServing = async (t: TestApp) => {
  const started = Date.now();
  // Polled first: the reads of this wait land on the primary, whose statistics may count them only after it.
  await eventually(async () => t.app.replicaReads!.stats().replicas.some((replica) => replica.available), 15_000);
  let asked = 0;
  await eventually(async () => {
    const before = readsOf(t).replica;
    // A pet not asked for lately: one found is cached for a second.
    await t.app.inject({ url: `/v1/pets/${1 + (asked++ % SEEDED)}`, headers: t.auth });
    return readsOf(t).replica > before;
  }, 15_000);
  return Date.now() - started;
};

/** Index and sequential scans of the pets table on one server (statistics are per server, a standby's its own). */
async function petsScans(url: string): Promise<number> {
  const [row] = await sqlAt<{ scans: number }>(
    url,
    "SELECT (coalesce(idx_scan, 0) + coalesce(seq_scan, 0))::int AS scans FROM pg_stat_user_tables WHERE relname = 'pets'",
  );
  return row?.scans ?? 0;
}

const insertPosition = async (url: string) =>
  parseLsn((await sqlAt<{ lsn: string }>(url, 'SELECT pg_current_wal_insert_lsn()::text AS lsn'))[0]!.lsn);

/** Writes WAL on the other cluster, a segment at a time, until its standby has replayed well past where this one's primary is. */
async function walAhead(other: PrimaryWithStandby, of: PrimaryWithStandby) {
  const target = (await insertPosition(of.primary.url())) + (64n << 20n);
  while ((await insertPosition(other.primary.url())) < target) {
    await sqlAt(other.primary.url(), 'SELECT txid_current()');
    await sqlAt(other.primary.url(), 'SELECT pg_switch_wal()');
  }
  // After a switch the insert position is past the next segment's header, which no standby reports replaying: a record more.
  await sqlAt(other.primary.url(), 'SELECT txid_current()');
  await other.waitForReplay();
}

const test = base
  // eslint-disable-next-line no-empty-pattern -- vitest reads a fixture's dependencies from this pattern
  .extend('pair', { scope: 'file' }, async ({}, { onCleanup }) =>
    cleanupStack(onCleanup, async (defer) => {
      const pair = await startPrimaryWithStandby();
      defer(() => pair.close());
      await sqlAt(pair.primary.url(), 'CREATE DATABASE pets');
      // The first app migrates; the seeded pets are there before any test reads.
      const first = await replicaApp(pair);
      await first.close();
      await sqlAt(
        pair.primary.url('pets'),
        `INSERT INTO pets (name, category_id) SELECT 'Seed-' || n, 1 + n % 5 FROM generate_series(1, ${SEEDED}) AS n`,
      );
      await pair.waitForReplay(30_000);
      return pair;
    }),
  )
  // Reads routed over the standby as an instance routes them, without an app around them: opened per test, closed after it.
  .extend('openReads', async ({ pair }, { onCleanup }) =>
    cleanupStack(onCleanup, async (defer) => (options: Partial<ReplicaOptions> = {}) => {
      const primary = createPostgresDatabase({ connectionString: pair.primary.url('pets') });
      defer(() => primary.close());
      const reads = createReplicaReads(primary, {
        urls: [pair.standby.url('pets')],
        maxLagMs: 5_000,
        timeoutMs: 1_000,
        log: pino({ level: 'silent' }),
        ...options,
      });
      defer(() => reads.close());
      return reads;
    }),
  )
  // Another cluster, its primary and a standby, with pets of its own: made only for the test that names it.
  // eslint-disable-next-line no-empty-pattern -- vitest reads a fixture's dependencies from this pattern
  .extend('otherCluster', { scope: 'file' }, async ({}, { onCleanup }) =>
    cleanupStack(onCleanup, async (defer) => {
      const other = await startPrimaryWithStandby();
      defer(() => other.close());
      await sqlAt(other.primary.url(), 'CREATE DATABASE pets');
      const db = createPostgresDatabase({ connectionString: other.primary.url('pets') });
      try {
        await migrate(db);
      } finally {
        await db.close();
      }
      await sqlAt(
        other.primary.url('pets'),
        "INSERT INTO pets (name, category_id) SELECT 'Foreign-' || n, 1 FROM generate_series(1, 20) AS n",
      );
      return other;
    }),
  )
  .extend('instances', { scope: 'file' }, async ({ pair }, { onCleanup }) =>
    cleanupStack(onCleanup, async (defer) => {
      const a = await replicaApp(pair);
      defer(() => a.close());
      const b = await replicaApp(pair);
      defer(() => b.close());
      return [a, b] as const;
    }),
  );

describeNeeding(NEEDS.postgresUrl, NEEDS.privatePostgres)('reads of pets on a streaming standby', () => {
  test('with the standby current and no writes, at least 90% of the reads of a walk are served by it', async ({ pair }) => {
    // No cache: every read of the walk reaches a server.
    const walker = await replicaApp(pair, { PETS_CACHE_MAX_BYTES: '0' });
    let closed = false;
    try {
      await replicaServing(walker);
      const scansBefore = { primary: await petsScans(pair.primary.url('pets')), standby: await petsScans(pair.standby.url('pets')) };
      const readsBefore = readsOf(walker);
      let requests = 0;
      let cursor: string | undefined;
      do {
        const page = await walker.app.inject({ url: `/v1/pets?limit=10${cursor ? `&cursor=${cursor}` : ''}`, headers: walker.auth });
        expect(page.statusCode).toBe(200);
        requests++;
        cursor = /cursor=([^&>]+)/.exec(String(page.headers.link ?? ''))?.[1];
      } while (cursor);
      for (let id = 1; id <= 100; id++) {
        const pet = await walker.app.inject({ url: `/v1/pets/${id * 3}`, headers: walker.auth });
        expect(pet.statusCode).toBe(200);
        requests++;
      }
      const readsAfter = readsOf(walker);
      const byTarget = { primary: readsAfter.primary - readsBefore.primary, replica: readsAfter.replica - readsBefore.replica };
      // The walker's connections end, and with them their statistics reach each server's views.
      await walker.close();
      closed = true;
      let scans = { primary: 0, standby: 0 };
      await eventually(async () => {
        await sleep(200);
        scans = {
          primary: (await petsScans(pair.primary.url('pets'))) - scansBefore.primary,
          standby: (await petsScans(pair.standby.url('pets'))) - scansBefore.standby,
        };
        return scans.primary + scans.standby >= requests;
      }, 15_000);
      const share = scans.standby / (scans.primary + scans.standby);
      console.log(
        `replicas: a walk of ${requests} reads (pages of 10 over ${SEEDED} pets, 100 pets by id): served by ${JSON.stringify(byTarget)}; ` +
          `scans of pets on the primary ${scans.primary}, on the standby ${scans.standby} (${(share * 100).toFixed(1)}% on the standby)`,
      );
      expect(byTarget.replica / requests).toBeGreaterThanOrEqual(0.9);
      expect(share).toBeGreaterThanOrEqual(0.9);
    } finally {
      if (!closed) await walker.close();
    }
  });

  test('with the standby 500 ms behind, a create on one instance is found and listed at once by the other', async ({ pair, instances }) => {
    const [a, b] = instances;
    await replicaServing(b);
    await pair.delayStandby(500);
    try {
      const readsBefore = readsOf(b);
      const found: number[] = [];
      let slowestListMs = 0;
      let listedAtOnce = 0;
      for (let i = 0; i < 100; i++) {
        const created = await a.app.inject({
          method: 'POST',
          url: '/v1/pets',
          headers: json(a.auth.authorization),
          payload: { name: `Delayed-${i}`, categoryId: 2 },
        });
        expect(created.statusCode).toBe(201);
        const { id } = created.json<{ id: number }>();
        const fetched = await b.app.inject({ url: `/v1/pets/${id}`, headers: b.auth });
        found.push(fetched.statusCode);
        const listedAfter = Date.now();
        const listed = async () => {
          const page = await b.app.inject({ url: `/v1/pets?limit=1&cursor=${encodeCursor(id - 1, undefined)}`, headers: b.auth });
          return page.json<Array<{ id: number }>>().some((pet) => pet.id === id);
        };
        if (await listed()) listedAtOnce++;
        // Never staler than a second, as without replicas.
        else await eventually(listed, 1_000);
        slowestListMs = Math.max(slowestListMs, Date.now() - listedAfter);
        // A standby read before it has the pet would miss it nearly every time: no need to go on.
        if (i + 1 - listedAtOnce > 10) break;
      }
      const readsAfter = readsOf(b);
      // While nothing is written, the other instance's reads return to the standby once it has replayed the last create.
      const backOnStandbyMs = await replicaServing(b);
      console.log(
        `replicas: standby 500 ms behind: 100 creates on one instance, getPet at once on the other: ${JSON.stringify(
          Object.fromEntries([...new Set(found)].map((status) => [status, found.filter((each) => each === status).length])),
        )}; listed there at once ${listedAtOnce} of 100, the slowest after ${slowestListMs} ms; its reads meanwhile by target ` +
          `${JSON.stringify({ primary: readsAfter.primary - readsBefore.primary, replica: readsAfter.replica - readsBefore.replica })}; ` +
          `back on the standby ${backOnStandbyMs} ms after the last`,
      );
      // Listed by the other instance within milliseconds, as without replicas (its notice arrives first).
      expect(listedAtOnce).toBeGreaterThanOrEqual(90);
      expect(found).toEqual(Array.from({ length: 100 }, () => 200));
      expect(slowestListMs).toBeLessThan(1_000);
    } finally {
      await pair.delayStandby(0);
    }
  });

  test('a new instance reads nothing from a standby far behind, until it has replayed the position the primary had then', async ({
    pair,
    openReads,
  }) => {
    await pair.waitForReplay();
    await pair.pauseReplay();
    try {
      // Created before the instance starts: it hears of no change, yet the standby has not applied them.
      await sqlAt(
        pair.primary.url('pets'),
        "INSERT INTO pets (name, category_id) SELECT 'Unreplayed-' || n, 3 FROM generate_series(1, 5) AS n",
      );
      const reads = openReads();
      const standby = () => reads.stats().replicas[0]!;
      const unreplayed = async () =>
        (await reads.query<{ count: number }>("SELECT count(*)::int AS count FROM pets WHERE name LIKE 'Unreplayed-%'"))[0]!.count;
      // Polled, and measured against a position of the primary.
      await eventually(async () => standby().lagSeconds > 0);
      expect(await unreplayed()).toBe(5);
      expect(reads.stats().reads).toEqual({ primary: 1, replica: 0 });
      expect(standby().available).toBe(false);
      expect(standby().lagSeconds).toBeGreaterThanOrEqual(5);
      // Once the standby has applied them, it takes the reads, and has them.
      await pair.resumeReplay();
      let onStandby = 0;
      await eventually(async () => {
        const before = reads.stats().reads.replica;
        onStandby = await unreplayed();
        return reads.stats().reads.replica > before;
      });
      expect(onStandby).toBe(5);
    } finally {
      await pair.resumeReplay();
    }
  });

  test('a standby behind for longer than DATABASE_REPLICA_MAX_LAG_MS takes no read, and says it is unavailable', async ({
    pair,
    openReads,
  }) => {
    const maxLagMs = 500;
    const reads = openReads({ maxLagMs });
    const standby = () => reads.stats().replicas[0]!;
    const found = async () =>
      (await reads.query<{ count: number }>("SELECT count(*)::int AS count FROM pets WHERE name = 'Behind-the-bound'"))[0]!.count;
    await eventually(async () => {
      await found();
      return reads.stats().reads.replica > 0;
    });
    // Ten times the bound late; the create is not announced to the reads, as one an operator makes.
    await pair.delayStandby(10 * maxLagMs);
    try {
      await sqlAt(pair.primary.url('pets'), "INSERT INTO pets (name, category_id) VALUES ('Behind-the-bound', 4)");
      await eventually(async () => standby().lagSeconds * 1_000 > maxLagMs);
      const before = reads.stats().reads;
      expect(await found()).toBe(1);
      expect(reads.stats().reads).toEqual({ primary: before.primary + 1, replica: before.replica });
      expect(standby().available).toBe(false);
    } finally {
      await pair.delayStandby(0);
      await pair.waitForReplay();
    }
  });

  test('a standby that stops answering holds a read for about DATABASE_REPLICA_TIMEOUT_MS, then the primary answers it', async ({
    pair,
  }) => {
    const reader = await replicaApp(pair, { PETS_CACHE_MAX_BYTES: '0', DB_POOL_SIZE: '4' });
    try {
      await replicaServing(reader);
      const timed = async (url: string) => {
        const started = Date.now();
        const { statusCode } = await reader.app.inject({ url, headers: reader.auth });
        return { statusCode, ms: Date.now() - started };
      };
      pair.freezeStandby();
      try {
        // More at once than the pool holds: reads on its open connections, on new ones never greeted, and waiting for one.
        const held = await Promise.all(
          Array.from({ length: 8 }, (_, i) =>
            timed(i % 2 === 0 ? `/v1/pets/${10 + i}` : `/v1/pets?limit=5&cursor=${encodeCursor(10 + i, undefined)}`),
          ),
        );
        const after = await timed('/v1/pets/30');
        const slowest = Math.max(...held.map((read) => read.ms));
        console.log(
          `replicas: standby frozen: 8 reads at once answered after ${held.map((read) => read.ms).join(', ')} ms; the next after ${after.ms} ms`,
        );
        expect([...held, after].map((read) => read.statusCode)).toEqual(Array.from({ length: 9 }, () => 200));
        // 1 s by default; without it, 5 s (a connection) and 10 s (an answer).
        expect(slowest).toBeLessThan(4_000);
        expect(after.ms).toBeLessThan(4_000);
      } finally {
        pair.thawStandby();
      }
    } finally {
      await reader.close();
    }
  });

  test('a standby of another cluster, ahead in WAL, is refused: no read reaches it, and the log and metrics say why', async ({
    pair,
    otherCluster,
  }) => {
    await walAhead(otherCluster, pair);
    const [foreign, own, primary] = [otherCluster.standby.url('pets'), pair.standby.url('pets'), pair.primary.url('pets')];
    // The primary named as a replica too: it answers, and is refused as no standby.
    const reader = await replicaApp(pair, { PETS_CACHE_MAX_BYTES: '0', DATABASE_REPLICA_URLS: [foreign, own, primary].join(',') });
    try {
      await replicaServing(reader);
      const readsBefore = readsOf(reader);
      const names: string[] = [];
      for (let i = 0; i < 10; i++) {
        const page = await reader.app.inject({ url: `/v1/pets?limit=5&cursor=${encodeCursor(1 + i, undefined)}`, headers: reader.auth });
        names.push(...page.json<Array<{ name: string }>>().map((pet) => pet.name));
        names.push((await reader.app.inject({ url: `/v1/pets/${1 + i}`, headers: reader.auth })).json<{ name: string }>().name);
      }
      expect(names).toHaveLength(60);
      expect(names.filter((name) => name.startsWith('Foreign-'))).toEqual([]);
      expect(readsOf(reader).replica - readsBefore.replica).toBeGreaterThanOrEqual(10);
      const metrics = (await buildMetricsServer(reader.app.metricsRegistry).inject('/metrics')).body;
      const series = (name: string, labels: string) =>
        new RegExp(`^${name}\\{${labels.replaceAll('.', '\\.')}\\} (\\d+)$`, 'm').exec(metrics)?.[1];
      expect(series('db_replica_refused', `replica="${replicaName(foreign)}",reason="other_cluster"`)).toBe('1');
      expect(series('db_replica_refused', `replica="${replicaName(primary)}",reason="not_in_recovery"`)).toBe('1');
      expect(series('db_replica_refused', `replica="${replicaName(own)}",reason="other_cluster"`)).toBe('0');
      expect(series('db_replica_available', `replica="${replicaName(foreign)}"`)).toBe('0');
      expect(series('db_replica_available', `replica="${replicaName(own)}"`)).toBe('1');
      const refusals = reader.logs.entries().filter((entry) => String(entry.msg).startsWith('read replica refused'));
      // Once each, in the order their polls came back.
      expect(refusals).toHaveLength(2);
      expect(refusals.map(({ replica, msg }) => ({ replica, msg }))).toEqual(
        expect.arrayContaining([
          { replica: replicaName(foreign), msg: expect.stringContaining('another cluster') },
          { replica: replicaName(primary), msg: expect.stringContaining('not in recovery') },
        ]),
      );
    } finally {
      await reader.close();
    }
  });

  test('a standby stopped under read load costs no request, and takes reads again within 10 s of its return', async ({ pair }) => {
    const reader = await replicaApp(pair, { PETS_CACHE_MAX_BYTES: '0' });
    const statuses: number[] = [];
    let running = true;
    const load = (async () => {
      for (let i = 0; running; i++) {
        const url = i % 2 === 0 ? `/v1/pets?limit=5&cursor=${encodeCursor(1 + (i % SEEDED), undefined)}` : `/v1/pets/${1 + (i % SEEDED)}`;
        statuses.push((await reader.app.inject({ url, headers: reader.auth })).statusCode);
        await sleep(5);
      }
    })();
    try {
      await replicaServing(reader);
      await sleep(1_000);
      const beforeStop = readsOf(reader);
      await pair.stopStandby();
      const stoppedAt = Date.now();
      await sleep(3_000);
      const whileStopped = readsOf(reader);
      await pair.startStandby();
      const backAt = Date.now();
      await eventually(async () => readsOf(reader).replica > whileStopped.replica, 10_000);
      const usedAgainMs = Date.now() - backAt;
      running = false;
      await load;
      const metrics = (await buildMetricsServer(reader.app.metricsRegistry).inject('/metrics')).body;
      const failed = statuses.filter((status) => status !== 200);
      console.log(
        `replicas: standby stopped for ${backAt - stoppedAt} ms under ${statuses.length} reads: ${failed.length} failed; while it was down ` +
          `${whileStopped.primary - beforeStop.primary} reads on the primary, ${whileStopped.replica - beforeStop.replica} on the standby; ` +
          `reads on the standby again ${usedAgainMs} ms after it accepted connections`,
      );
      expect(failed).toEqual([]);
      expect(usedAgainMs).toBeLessThan(10_000);
      expect(metrics).toMatch(/^db_reads_total\{target="replica"\} [1-9]/m);
      expect(metrics).toMatch(new RegExp(`^db_replica_lag_seconds\\{replica="127\\.0\\.0\\.1:${pair.standby.port}/pets"\\} `, 'm'));
    } finally {
      running = false;
      await load;
      await pair.startStandby();
      await reader.close();
    }
  });
});
