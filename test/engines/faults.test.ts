/**
 * Fault injection with real processes: the server (src/server.ts), a private PostgreSQL server
 * that may be stopped, frozen and restarted, and a private Redis. Clients keep sending while the
 * fault happens; every response is recorded and checked, and each test prints its figures.
 */
import { randomUUID } from 'node:crypto';
import { readdirSync } from 'node:fs';
import { Redis } from 'ioredis';
import pg from 'pg';
import { test as base, expect, it } from 'vitest';
import { createApiKeysRepository } from '../../src/api-keys/repository.js';
import { createTestDatabase, POSTGRES_URL } from '../support/databases.js';
import { openExistingDatabase } from '../../harness/databases.js';
import { eventually } from '../support/eventually.js';
import { type ServerProcess, startServer } from '../../harness/processes.js';
import { describeNeeding, NEEDS } from '../support/engines/index.js';
import { startRedis } from '../support/redis.js';
import { startPostgresServer, type PostgresServer } from '../support/postgres-server.js';
import { buildTestApp } from '../support/app.js';
import { bearer, developmentKey } from '../support/keys.js';
import { sleep } from '../support/time.js';
import {
  CLIENT_TIMEOUT_MS,
  expectCleanStop,
  keyAccepted,
  malformed503s,
  maxLatency,
  mixed,
  seconds,
  send,
  startLoad,
  tally,
  type Outcome,
  answeredSince,
} from '../support/fault-load.js';
import { minuteAndDay } from '../../src/plans/limits.js';

/** An enterprise key no test can exhaust, created straight in the database. */
async function createKey(connectionString: string): Promise<string> {
  const db = await openExistingDatabase({ url: connectionString });
  try {
    const { key } = await createApiKeysRepository(db).create({
      plan: 'enterprise',
      name: 'faults',
      limits: minuteAndDay(1e9, 2e9),
    });
    return `Bearer ${key}`;
  } finally {
    await db.close();
  }
}

async function readyz(server: ServerProcess) {
  const response = await fetch(`${server.origin}/readyz`, { signal: AbortSignal.timeout(CLIENT_TIMEOUT_MS) });
  return { status: response.status, retryAfter: response.headers.get('retry-after'), body: await response.json() };
}

async function queryAll<Row>(connectionString: string, sql: string, params: unknown[] = []): Promise<Row[]> {
  const client = new pg.Client({ connectionString });
  await client.connect();
  try {
    return (await client.query(sql, params)).rows as Row[];
  } finally {
    await client.end();
  }
}

/** A PostgreSQL server of the file's own, which tests stop, freeze and start again; removed after the file's last test. */
// eslint-disable-next-line no-empty-pattern -- vitest reads a fixture's dependencies from this pattern
const test = base.extend('postgres', { scope: 'file' }, async ({}, { onCleanup }): Promise<PostgresServer> => {
  const postgres = await startPostgresServer();
  onCleanup(() => postgres.destroy());
  return postgres;
});

describeNeeding(NEEDS.privatePostgres)('PostgreSQL faults (a private PostgreSQL server)', () => {
  test('restarted under load: 503 service_unavailable with Retry-After while it is down, no hang, no crash, recovery by itself', async ({
    postgres,
  }) => {
    const database = await postgres.createDatabase();
    const server = await startServer({ env: { DATABASE_URL: database.url } });
    try {
      const authorization = await createKey(database.url);
      await keyAccepted(server, authorization);

      const load = startLoad(8, mixed(server.origin, authorization));
      await eventually(async () => load.outcomes.filter((outcome) => outcome.status === 201).length >= 20, 10_000);

      const stopping = Date.now();
      await postgres.stop('fast');
      const down = Date.now();
      let readyDuring: Awaited<ReturnType<typeof readyz>> | undefined;
      await eventually(async () => (readyDuring = await readyz(server)).status === 503, 10_000);
      await sleep(Math.max(0, 2_000 - (Date.now() - down)));

      const starting = Date.now();
      await postgres.start();
      let readyAfter: Awaited<ReturnType<typeof readyz>> | undefined;
      const recoveryMs = await eventually(async () => (readyAfter = await readyz(server)).status === 200, 20_000);
      const ready = Date.now();
      await answeredSince(load, ready, 10);
      const outcomes = await load.stop();

      const before = outcomes.filter((outcome) => outcome.ended < stopping);
      const during = outcomes.filter((outcome) => outcome.started >= down && outcome.ended < starting);
      const after = outcomes.filter((outcome) => outcome.started >= ready);
      const figures =
        `postgres restart: ${outcomes.length} requests, ${tally(outcomes)}; down ${seconds(starting - down)}: ${during.length} requests, ` +
        `${tally(during)}; ready ${seconds(recoveryMs)} after the restart, then ${after.length} requests, ${tally(after)}; ` +
        `max latency ${seconds(maxLatency(outcomes))}`;
      console.log(figures);

      // No hang and no crash: every request got an HTTP answer, well inside the request timeout.
      expect(outcomes.filter((outcome) => typeof outcome.status !== 'number')).toEqual([]);
      expect(maxLatency(outcomes)).toBeLessThan(20_000);
      // Only successes and well-formed 503s; never a 500.
      expect(outcomes.filter((outcome) => ![200, 201, 503].includes(outcome.status as number))).toEqual([]);
      expect(malformed503s(outcomes)).toEqual([]);
      // The outage was real and seen: everything sent while the database was down got its 503...
      expect(before.length).toBeGreaterThan(0);
      expect(before.filter((outcome) => outcome.status !== 200 && outcome.status !== 201)).toEqual([]);
      // (but for a page read shortly before, which the cache may serve for the rest of its 1 s lifetime)
      const fromCache = (outcome: Outcome) => outcome.op === 'list' && outcome.status === 200 && outcome.ended < down + 1_000;
      expect(during.length).toBeGreaterThan(0);
      expect(during.filter((outcome) => outcome.status !== 503 && !fromCache(outcome))).toEqual([]);
      expect(readyDuring).toEqual({
        status: 503,
        retryAfter: '5',
        body: { code: 'service_unavailable', message: expect.any(String), status: 503 },
      });
      // ...and the service came back by itself: everything sent once /readyz said so succeeded.
      expect(readyAfter).toEqual({ status: 200, retryAfter: null, body: { status: 'ready' } });
      expect(after.length).toBeGreaterThan(0);
      expect(after.filter((outcome) => outcome.status !== 200 && outcome.status !== 201)).toEqual([]);
      // The process lived through it: it still answers and stops cleanly.
      expect((await fetch(`${server.origin}/healthz`)).status).toBe(200);
      expect(await server.stop('SIGTERM')).toBe(0);
    } finally {
      await server.stop('SIGKILL');
      await database.drop();
    }
  });

  test("a key this instance has not seen, while the database is down: 503 with the address's rate-limit headers, counting nothing", async ({
    postgres,
  }) => {
    const database = await postgres.createDatabase();
    const t = await buildTestApp({ DATABASE_URL: database.url });
    let stopped = false;
    try {
      // A Pro key (300 a minute), so that the Free plan's 60 can only be the address's.
      const { key } = await t.app.apiKeysRepository.create({ plan: 'pro', name: 'unseen' });
      await postgres.stop('fast');
      stopped = true;
      for (let i = 0; i < 2; i++) {
        const response = await t.app.inject({ url: '/v1/pets?limit=1', headers: bearer(key) });
        expect(response.statusCode, response.body).toBe(503);
        expect(response.json().code).toBe('service_unavailable');
        expect(response.headers['x-ratelimit-limit']).toBe('60');
        expect(response.headers['x-ratelimit-remaining']).toBe('60');
        expect(response.headers['x-ratelimit-reset']).toMatch(/^\d{10}$/);
      }
    } finally {
      if (stopped) await postgres.start();
      await t.close();
      await database.drop();
    }
  });

  test('frozen (it accepts connections and answers nothing): every request ends within the bounded pg waits, then it recovers', async ({
    postgres,
  }) => {
    const database = await postgres.createDatabase();
    // Twice as many clients as connections: when it freezes, some requests wait on a frozen query
    // (bounded at 10 s) and the others for a connection (bounded at 5 s); both bounds are needed.
    const server = await startServer({ env: { DATABASE_URL: database.url, DB_POOL_SIZE: '4' } });
    try {
      const authorization = await createKey(database.url);
      await keyAccepted(server, authorization);

      const load = startLoad(8, mixed(server.origin, authorization));
      await eventually(async () => load.outcomes.filter((outcome) => outcome.status === 201).length >= 20, 10_000);

      // Longer than the longest bounded wait a request already in flight can meet (10 s for its
      // query), so requests in flight at the freeze can only have been ended by the bounds.
      const FREEZE_MS = 12_500;
      postgres.freeze();
      // Taken once every process is stopped (freeze() is synchronous): whatever is sent from now on
      // meets a database that answers nothing.
      const frozen = Date.now();
      const readyDuringFreeze = readyz(server).then((result) => ({ ...result, ms: Date.now() - frozen }));
      try {
        await sleep(FREEZE_MS);
      } finally {
        postgres.thaw();
      }
      const thawed = Date.now();
      const { ms: readyDuringMs, ...readyDuring } = await readyDuringFreeze;
      const recoveryMs = await eventually(async () => (await readyz(server)).status === 200, 20_000);
      const ready = Date.now();
      await answeredSince(load, ready, 10);
      const outcomes = await load.stop();

      // Caught by the freeze: sent in its first second. Each either waits for one of the (frozen)
      // connections, at most 5 s, or holds one with its query, at most 10 s: both before the thaw.
      const caught = outcomes.filter((outcome) => outcome.started >= frozen && outcome.started < frozen + 1_000);
      const during = outcomes.filter((outcome) => outcome.started >= frozen && outcome.started < thawed);
      const after = outcomes.filter((outcome) => outcome.started >= ready);
      const answeredWhileFrozen = outcomes.filter((outcome) => outcome.ended > frozen + 1_000 && outcome.ended < thawed);
      console.log(
        `postgres frozen ${seconds(thawed - frozen)}: ${outcomes.length} requests, ${tally(outcomes)}; sent in its first second: ` +
          `${caught.length}, ${tally(caught)}, answered after ${caught.map((outcome) => seconds(outcome.ended - frozen)).join(', ')}; ` +
          `sent while frozen: ${during.length}, ${tally(during)}; max latency ${seconds(maxLatency(outcomes))}; ` +
          `ready ${seconds(recoveryMs)} after the thaw, then ${after.length} requests, ${tally(after)}`,
      );

      expect(outcomes.filter((outcome) => typeof outcome.status !== 'number')).toEqual([]);
      // 5 s for a connection plus 10 s for a query is the worst case; 30 s is the request timeout.
      expect(maxLatency(outcomes)).toBeLessThan(20_000);
      expect(outcomes.filter((outcome) => ![200, 201, 503].includes(outcome.status as number))).toEqual([]);
      expect(malformed503s(outcomes)).toEqual([]);
      // Every request caught by the freeze was answered 503 while the database was still frozen:
      // the waits are bounded, not ended by the thaw. Only a page read shortly before could still
      // come from the cache, for at most its 1 s lifetime.
      const fromCache = (outcome: Outcome) => outcome.op === 'list' && outcome.status === 200 && outcome.ended < frozen + 1_000;
      expect(caught.filter((outcome) => !fromCache(outcome)).length).toBeGreaterThanOrEqual(4);
      expect(caught.filter((outcome) => !fromCache(outcome) && (outcome.status !== 503 || outcome.ended >= thawed))).toEqual([]);
      expect(answeredWhileFrozen.filter((outcome) => outcome.status !== 503)).toEqual([]);
      expect(readyDuring).toEqual({
        status: 503,
        retryAfter: '5',
        body: { code: 'service_unavailable', message: expect.any(String), status: 503 },
      });
      expect(readyDuringMs).toBeLessThan(FREEZE_MS);
      // And it recovered by itself once the database answered again.
      expect(after.length).toBeGreaterThan(0);
      expect(after.filter((outcome) => outcome.status !== 200 && outcome.status !== 201)).toEqual([]);
      expect(await server.stop('SIGTERM')).toBe(0);
    } finally {
      await server.stop('SIGKILL');
      await database.drop();
    }
  });

  test('SIGTERM while 50 clients create pets: in-flight requests complete, every 201 is stored and nothing else, exit 0 within the grace period', async ({
    postgres,
  }) => {
    const database = await postgres.createDatabase();
    const server = await startServer({ env: { DATABASE_URL: database.url } });
    const locker = new pg.Client({ connectionString: database.url });
    try {
      const authorization = await createKey(database.url);
      await keyAccepted(server, authorization);
      const load = startLoad(50, (client, seq) => send(server.origin, authorization, 'create', `sigterm-${client}-${seq}`), {
        stopWhen: (outcome) => outcome.status !== 201,
      });
      await eventually(async () => load.outcomes.length >= 200, 15_000);

      // Inserts wait on a lock the test holds, so that requests are surely in flight when the
      // signal arrives; the lock is released a second after it. Creates go in batches, so one or
      // two INSERTs wait on it with every other create queued behind them.
      await locker.connect();
      await locker.query('BEGIN');
      await locker.query('LOCK TABLE pets IN SHARE MODE');
      await eventually(async () => {
        const { rows } = await locker.query(
          "SELECT count(*)::int AS waiting FROM pg_locks WHERE relation = 'pets'::regclass AND NOT granted",
        );
        return rows[0].waiting >= 1;
      }, 10_000);
      const signalled = Date.now();
      const exited = server.stop('SIGTERM');
      await sleep(1_000);
      await locker.query('COMMIT');
      const code = await exited;
      const exitMs = Date.now() - signalled;
      await load.done;
      const outcomes = load.outcomes;

      const created = outcomes.filter((outcome) => outcome.status === 201);
      const failed = outcomes.filter((outcome) => outcome.status !== 201);
      // The lock holds every INSERT for a second after the signal: whatever was answered more than
      // half a second after it was held across it (a request answered just as the signal was sent
      // may have left before the server saw the signal).
      const inFlight = outcomes.filter((outcome) => outcome.started < signalled && outcome.ended > signalled + 500);
      const rows = await queryAll<{ id: number; name: string }>(database.url, 'SELECT id::int AS id, name FROM pets ORDER BY id');
      console.log(
        `SIGTERM with 50 clients: ${outcomes.length} requests, ${created.length} x 201, ${failed.length} failures (${tally(failed)}` +
          `${failed.some((f) => f.error) ? `: ${[...new Set(failed.map((f) => f.error).filter(Boolean))].join(', ')}` : ''}); ` +
          `${inFlight.length} in flight at the signal, ${tally(inFlight)}; ${rows.length} rows stored; exit ${code} after ${seconds(exitMs)}`,
      );

      expect(code).toBe(0);
      expect(exitMs).toBeLessThan(10_000);
      // In-flight requests (held on the lock across the signal) completed with their 201, and
      // their connections closed with them: a drained server does not wait on idle keep-alives.
      expect(inFlight.length).toBeGreaterThanOrEqual(5);
      expect(inFlight.filter((outcome) => outcome.status !== 201)).toEqual([]);
      expect(inFlight.filter((outcome) => outcome.connection !== 'close')).toEqual([]);
      // Every client stopped, never on a 500 or a hang.
      expect(failed).toHaveLength(50);
      expectCleanStop(failed, created, rows);
    } finally {
      await locker.end().catch(() => {});
      await server.stop('SIGKILL');
      await database.drop();
    }
  });

  test('two instances starting at the same moment on an empty database run the migrations once, and both serve', async ({ postgres }) => {
    const database = await postgres.createDatabase();
    // Both must reach the migration step together: hold the service's migration lock (the
    // constant in src/platform/db/migrate.ts) until both wait for it, then let them race.
    const MIGRATION_LOCK = 7_310_042_015;
    const holder = new pg.Client({ connectionString: database.url });
    await holder.connect();
    await holder.query('BEGIN');
    await holder.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
    const env = { DATABASE_URL: database.url };
    const starting = Promise.allSettled([startServer({ env }), startServer({ env })]);
    const servers: ServerProcess[] = [];
    try {
      // Both instances blocked on the lock at once (or the service takes no lock: then this fails).
      let waiting = 0;
      const waitedMs = await eventually(async () => {
        const { rows } = await holder.query(
          "SELECT count(*)::int AS waiting FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        );
        waiting = rows[0].waiting;
        return waiting === 2;
      }, 30_000).catch(() => undefined);
      await holder.query('COMMIT');
      const started = await starting;
      for (const result of started) if (result.status === 'fulfilled') servers.push(result.value);
      expect(started.map((result) => (result.status === 'rejected' ? String(result.reason) : 'started'))).toEqual(['started', 'started']);
      expect({ waitingTogether: waiting }).toEqual({ waitingTogether: 2 });

      const versions = await queryAll<{ version: number; times: number }>(
        database.url,
        'SELECT version::int AS version, count(*)::int AS times FROM schema_migrations GROUP BY version ORDER BY version',
      );
      // Postgrator's baseline row 0, then one row per file of migrations/.
      const files = readdirSync(new URL('../../migrations/', import.meta.url))
        .filter((file) => /^\d+\.do\./.test(file))
        .map((file) => Number(file.split('.')[0]))
        .sort((a, b) => a - b);
      expect(versions).toEqual([0, ...files].map((version) => ({ version, times: 1 })));

      const [a, b] = servers as [ServerProcess, ServerProcess];
      const authorization = await createKey(database.url);
      await keyAccepted(a, authorization);
      await keyAccepted(b, authorization);
      const viaA = await send(a.origin, authorization, 'create', 'created-through-a');
      const viaB = await send(b.origin, authorization, 'create', 'created-through-b');
      expect([viaA.status, viaB.status]).toEqual([201, 201]);
      const listedByB = await fetch(`${b.origin}/v1/pets?limit=100`, { headers: { authorization } }).then((r) => r.json());
      const listedByA = await fetch(`${a.origin}/v1/pets?limit=100`, { headers: { authorization } }).then((r) => r.json());
      expect(listedByA).toEqual([viaA.body, viaB.body]);
      expect(listedByB).toEqual(listedByA);
      console.log(
        `concurrent start: both instances waited on the migration lock together (${seconds(waitedMs!)} after their start), ` +
          `schema_migrations ${versions.map((v) => `${v.version} x ${v.times}`).join(', ')}, both served (201 via each, same listing)`,
      );
      expect(await Promise.all(servers.map((server) => server.stop('SIGTERM')))).toEqual([0, 0]);
    } finally {
      await holder.end().catch(() => {});
      await Promise.all(servers.map((server) => server.stop('SIGKILL')));
      await database.drop();
    }
  });
});

describeNeeding(NEEDS.redisServer)('Redis faults (a private Redis server)', () => {
  it('stopped and started under load: no 5xx meanwhile (per-instance memory), and counting resumes in Redis', async () => {
    const redis = await startRedis();
    let redisUp = true;
    const prefix = `faults:${randomUUID()}:`;
    // PostgreSQL when the suite has one; otherwise the embedded database and its development key.
    const database = POSTGRES_URL ? await createTestDatabase() : undefined;
    const server = await startServer({
      env: {
        ...(database ? { DATABASE_URL: database.url! } : { DATA_DIR: 'memory://' }),
        REDIS_URL: redis.url,
        REDIS_KEY_PREFIX: prefix,
      },
    });
    const probe = new Redis(redis.url, { maxRetriesPerRequest: 0 });
    probe.on('error', () => {});
    try {
      const authorization = database ? await createKey(database.url!) : `Bearer ${await developmentKey(server)}`;
      await keyAccepted(server, authorization);
      const logged = (text: string) => server.output().includes(text);

      // The development key is on the business plan (1,000 a minute): the pace keeps each store
      // (Redis before, memory during, Redis after) under it, so any 429 would be a miscount.
      const load = startLoad(4, mixed(server.origin, authorization), { pauseMs: 40 });
      await answeredSince(load, 0, 10);
      expect((await probe.keys(`${prefix}*`)).length).toBeGreaterThan(0);

      const stopping = Date.now();
      await redis.stop();
      redisUp = false;
      const down = Date.now();
      await eventually(async () => logged('Redis unreachable'), 10_000);
      await sleep(Math.max(0, 3_000 - (Date.now() - down)));
      const starting = Date.now();
      await redis.start();
      redisUp = true;
      const backMs = await eventually(async () => logged('Redis is back'), 15_000);
      await answeredSince(load, Date.now(), 10);
      const outcomes = await load.stop();

      const during = outcomes.filter((outcome) => outcome.started >= down && outcome.ended < starting);
      // Redis restarted empty: counters under the prefix exist again only if counting resumed there.
      const keysAfter = await probe.keys(`${prefix}*`);
      const dayCount = async () => {
        const dayKeys = (await probe.keys(`${prefix}*`)).filter((key) => key.includes(':d:'));
        const values = dayKeys.length ? await probe.mget(...dayKeys) : [];
        return values.reduce((sum, value) => sum + Number(value ?? 0), 0);
      };
      const countBefore = await dayCount();
      for (let i = 0; i < 5; i++) expect((await send(server.origin, authorization, 'list')).status).toBe(200);
      const countAfter = await dayCount();
      console.log(
        `redis stop/start: ${outcomes.length} requests, ${tally(outcomes)}; down ${seconds(starting - stopping)}: ${during.length} requests, ` +
          `${tally(during)}; back in Redis ${seconds(backMs)} after the restart, ${keysAfter.length} keys under the prefix; ` +
          `max latency ${seconds(maxLatency(outcomes))}`,
      );

      expect(outcomes.filter((outcome) => outcome.status !== 200 && outcome.status !== 201)).toEqual([]);
      expect(during.length).toBeGreaterThanOrEqual(10);
      // One outage, one switch each way: the log says so once, however many requests it spanned.
      const times = (text: string) => server.output().split(text).length - 1;
      expect([times('Redis unreachable'), times('Redis is back')]).toEqual([1, 1]);
      expect(keysAfter.length).toBeGreaterThan(0);
      expect(countAfter - countBefore).toBe(5);
      expect(await server.stop('SIGTERM')).toBe(0);
    } finally {
      probe.disconnect();
      await server.stop('SIGKILL');
      if (redisUp) await redis.stop();
      await database?.drop();
    }
  });
});
