import { afterAll, beforeAll, expect, test } from 'vitest';
import { Cluster, Redis } from 'ioredis';
import pg from 'pg';
import { eventually } from '../support/eventually.js';
import { startPostgresServer, type PostgresServer } from '../support/postgres-server.js';
import {
  describeNeeding,
  NEEDS,
  startPgBouncer,
  startPrimaryWithStandby,
  startRedisCluster,
  startSentinel,
  type PgBouncer,
  type PrimaryWithStandby,
  type RedisCluster,
  type SentinelSetup,
} from '../support/engines/index.js';

// The harnesses of test/support/engines, each proven on the real engine (issue #20). Every engine
// runs on free loopback ports in a temporary directory of its own, so this file runs beside the
// others; afterAll closes each, whatever failed. .ci/install-engines.sh installs the packages.

/** Failover happens in about two node timeouts (or down-after periods); this leaves room for a loaded machine. */
const FAILOVER_BOUND_MS = 15_000;

/** pg clients a section opened, ended in its afterAll. */
function clientPool() {
  const clients: pg.Client[] = [];
  return {
    async connect(url: string) {
      const client = new pg.Client({ connectionString: url });
      client.on('error', () => {});
      clients.push(client);
      await client.connect();
      return client;
    },
    end: () => Promise.all(clients.splice(0).map((client) => client.end().catch(() => {}))),
  };
}

/** The SQLSTATE a promise rejects with. */
const sqlState = (promise: Promise<unknown>) =>
  promise.then(
    () => 'no error',
    (error: { code?: string }) => error.code,
  );

describeNeeding(NEEDS.redisServer)('Redis Cluster (startRedisCluster)', () => {
  let cluster: RedisCluster | undefined;
  let client: Cluster | undefined;

  beforeAll(async () => {
    cluster = await startRedisCluster({ masters: 3, replicasPerMaster: 1, nodeTimeoutMs: 1_000, password: 'cluster-secret' });
    client = new Cluster(
      cluster.seeds.split(',').map((seed) => ({ host: seed.split(':')[0], port: Number(seed.split(':')[1]) })),
      { redisOptions: { password: cluster.password }, retryDelayOnFailover: 200, retryDelayOnClusterDown: 200 },
    );
    client.on('error', () => {});
  });
  afterAll(async () => {
    client?.disconnect();
    await cluster?.close();
  });

  test('reaches cluster_state:ok with 3 masters, and a SET on a key of each master works through ioredis Cluster', async () => {
    const masters = await cluster!.masters();
    expect(masters).toHaveLength(3);
    expect(cluster!.nodes.filter((node) => node.role === 'replica')).toHaveLength(3);
    for (const master of masters) {
      expect(master.pid).toBeGreaterThan(0);
      const key = await cluster!.keyOn(master.port);
      expect(await client!.set(key, `on ${master.port}`)).toBe('OK');
      expect(await client!.get(key)).toBe(`on ${master.port}`);
    }
  });

  test('a master killed fails over to its replica, which serves its keys with the data', async () => {
    const [victim] = await cluster!.masters();
    const key = await cluster!.keyOn(victim!.port);
    await client!.set(key, 'before the crash');
    await cluster!.waitForReplication();
    const replica = (await cluster!.topology()).find((node) => node.masterId === victim!.id);

    await cluster!.kill(victim!.port);
    const failoverMs = await cluster!.waitUntilOk(FAILOVER_BOUND_MS);

    const masters = await cluster!.masters();
    expect(masters.map((master) => master.port)).not.toContain(victim!.port);
    expect(masters.map((master) => master.port)).toContain(replica!.port);
    expect(failoverMs).toBeLessThan(FAILOVER_BOUND_MS);
    await eventually(
      () =>
        client!.get(key).then(
          (value) => value === 'before the crash',
          () => false,
        ),
      10_000,
    );
    expect(await client!.set(key, 'after the failover')).toBe('OK');

    // The old master comes back as a replica of the one that took over.
    await cluster!.restart(victim!.port);
    const back = (await cluster!.topology()).find((node) => node.port === victim!.port);
    expect(back).toMatchObject({ role: 'replica', failing: false });
  });
});

describeNeeding(NEEDS.redisServer)('Redis Sentinel (startSentinel)', () => {
  let setup: SentinelSetup | undefined;
  let client: Redis | undefined;

  beforeAll(async () => {
    setup = await startSentinel({ replicas: 1, quorum: 2, downAfterMs: 1_000, failoverTimeoutMs: 3_000, password: 'sentinel-secret' });
    client = new Redis({
      sentinels: setup.sentinelAddresses,
      name: setup.masterName,
      password: setup.password,
      maxRetriesPerRequest: 1,
    });
    client.on('error', () => {});
  });
  afterAll(async () => {
    client?.disconnect();
    await setup?.close();
  });

  test('a master killed: +switch-master seen, the new master takes writes, the old one comes back', { timeout: 120_000 }, async () => {
    const before = await setup!.master();
    expect(await client!.set('engines:sentinel', 'before')).toBe('OK');

    const killed = await setup!.killMaster();
    expect(killed).toMatchObject({ port: before.port, pid: before.pid });
    const switched = await setup!.waitForSwitch(FAILOVER_BOUND_MS);
    expect(switched.from.port).toBe(before.port);
    expect(switched.to.port).not.toBe(before.port);
    expect(switched.afterKillMs).toBeLessThan(FAILOVER_BOUND_MS);
    expect(await setup!.master()).toMatchObject({ port: switched.to.port, pid: switched.to.pid });

    // Through the sentinels, the client finds the new master and writes there.
    await eventually(
      () =>
        client!.set('engines:sentinel', 'after').then(
          (reply) => reply === 'OK',
          () => false,
        ),
      10_000,
    );
    const direct = new Redis({ port: switched.to.port, password: setup!.password, lazyConnect: true });
    try {
      await direct.connect();
      expect(await direct.get('engines:sentinel')).toBe('after');
    } finally {
      direct.disconnect();
    }

    // Restarted as it was (a master), a Sentinel converts it to a replica of the new master (or,
    // as seen once on a loaded machine, fails over to it again).
    await setup!.restart(before.port);
    await setup!.waitUntilRejoined(before.port, 60_000);
  });
});

describeNeeding(NEEDS.pgbouncer, NEEDS.privatePostgres)('PgBouncer (startPgBouncer)', () => {
  let upstream: PostgresServer | undefined;
  let transaction: PgBouncer | undefined;
  let session: PgBouncer | undefined;
  const clients = clientPool();

  beforeAll(async () => {
    upstream = await startPostgresServer();
    const address = { host: '127.0.0.1', port: upstream.port };
    [transaction, session] = await Promise.all([
      startPgBouncer({ upstream: address, mode: 'transaction', poolSize: 1 }),
      startPgBouncer({ upstream: address, mode: 'session', poolSize: 4 }),
    ]);
  });
  afterAll(async () => {
    await clients.end();
    await Promise.all([transaction?.close(), session?.close()]);
    await upstream?.destroy();
  });

  test('transaction mode: named prepared statements of two clients collide (42P05) and vanish (26000)', async () => {
    const first = await clients.connect(transaction!.url());
    const second = await clients.connect(transaction!.url());
    const statement = { name: 'engines_pet', text: 'SELECT $1::int AS id', values: [1] };

    expect((await first.query(statement)).rows).toEqual([{ id: 1 }]);
    // One server connection: the second client's Parse meets the first client's statement.
    expect(await sqlState(second.query(statement))).toBe('42P05');
    // The pooler replaces the server connection (as on a switchover); the first client still thinks it prepared the statement.
    await transaction!.admin('RECONNECT');
    expect(await sqlState(first.query(statement))).toBe('26000');
  });

  test('session mode: each client keeps its server connection, and its statements', async () => {
    const first = await clients.connect(session!.url());
    const second = await clients.connect(session!.url());
    const statement = { name: 'engines_pet', text: 'SELECT $1::int AS id', values: [2] };
    for (const client of [first, second, first, second]) expect((await client.query(statement)).rows).toEqual([{ id: 2 }]);
    const pids = await Promise.all(
      [first, second].map(async (client) => (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid),
    );
    expect(new Set(pids).size).toBe(2);
  });
});

describeNeeding(NEEDS.privatePostgres)('PostgreSQL primary and standby (startPrimaryWithStandby)', () => {
  let pair: PrimaryWithStandby | undefined;
  let bouncer: PgBouncer | undefined;
  const clients = clientPool();

  beforeAll(async () => {
    pair = await startPrimaryWithStandby();
    if (!NEEDS.pgbouncer) bouncer = await startPgBouncer({ upstream: { host: '127.0.0.1', port: pair.primary.port }, mode: 'session' });
  });
  afterAll(async () => {
    await clients.end();
    await bouncer?.close();
    await pair?.close();
  });

  test('a row written on the primary appears on the standby, which refuses writes', async () => {
    const primary = await clients.connect(pair!.primary.url());
    await primary.query('CREATE TABLE engines_pets (name text)');
    await primary.query(`INSERT INTO engines_pets VALUES ('Rex')`);
    await pair!.waitForReplay();
    const standby = await clients.connect(pair!.standby.url());
    expect((await standby.query('SELECT name FROM engines_pets')).rows).toEqual([{ name: 'Rex' }]);
    expect(await sqlState(standby.query(`INSERT INTO engines_pets VALUES ('Tom')`))).toBe('25006');
  });

  test('the primary killed, promote() makes the standby take writes', async () => {
    await pair!.killPrimary();
    await pair!.promote();
    const promoted = await clients.connect(pair!.standby.url());
    await promoted.query(`INSERT INTO engines_pets VALUES ('Tom')`);
    expect((await promoted.query('SELECT name FROM engines_pets ORDER BY name')).rows).toEqual([{ name: 'Rex' }, { name: 'Tom' }]);
  });

  test.skipIf(NEEDS.pgbouncer !== undefined)('PgBouncer pointed at the promoted standby (pointAt) serves from it', async () => {
    await bouncer!.pointAt({ host: '127.0.0.1', port: pair!.standby.port });
    const client = await clients.connect(bouncer!.url());
    const { rows } = await client.query(`SELECT current_setting('port') AS port, pg_is_in_recovery() AS recovering`);
    expect(rows).toEqual([{ port: String(pair!.standby.port), recovering: false }]);
  });
});
