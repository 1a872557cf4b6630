import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { expect } from 'vitest';
import { createCustomerRules } from '../../src/customers/rules.js';
import { KEYS_COMMAND } from '../support/admin.js';
import { insertBalance } from '../support/credit-balances.js';
import { eventually } from '../support/eventually.js';
import { bearer, waitForKeyOnApp } from '../support/keys.js';
import { describeNeeding, NEEDS, startRedisCluster, type RedisCluster } from '../support/engines/index.js';
import { fallbackGauge, freeKeyRun, twoInstancesOn } from '../support/scale.js';
import { MINUTE } from '../support/time.js';
import { minuteAndDay } from '../../src/plans/limits.js';

// The limiter on a real Redis Cluster (REDIS_CLUSTER_NODES, issue #20), with AUTH as managed
// clusters require: 3 masters and their replicas on loopback. Two instances share the counters,
// so they share a PostgreSQL database: this runs in the PostgreSQL suite.

const PASSWORD = `pw-${randomUUID()}`;

const test = twoInstancesOn(
  () => startRedisCluster({ masters: 3, replicasPerMaster: 1, nodeTimeoutMs: 1_000, password: PASSWORD }),
  (cluster) => ({ REDIS_CLUSTER_NODES: cluster.seeds, REDIS_PASSWORD: PASSWORD, REDIS_KEY_PREFIX: `test:${randomUUID()}:` }),
);

/**
 * The master serving the slot of a key's rate-limit subject (`key:<quota id>`, the hash tag of
 * every Redis key the limiter keeps for it), asked of the cluster itself.
 */
async function masterOfQuota(cluster: RedisCluster, quotaId: number) {
  const masters = await cluster.masters();
  const probe = new Redis({ host: masters[0]!.host, port: masters[0]!.port, password: PASSWORD, lazyConnect: true });
  await probe.connect();
  try {
    const slot = Number(await probe.call('CLUSTER', 'KEYSLOT', `key:${quotaId}`));
    return masters.find((each) => each.slots.some(([first, last]) => slot >= first && slot <= last))!;
  } finally {
    probe.disconnect();
  }
}

/** A new Free key whose rate-limit subject hashes to a slot of each master, by master port. */
async function freeKeysOnEachMaster(cluster: RedisCluster, create: () => Promise<{ key: string; record: { quotaId: number } }>) {
  const masterCount = (await cluster.masters()).length;
  const found = new Map<number, string>();
  while (found.size < masterCount) {
    const { key, record } = await create();
    const master = await masterOfQuota(cluster, record.quotaId);
    if (!found.has(master.port)) found.set(master.port, key);
  }
  return found;
}

describeNeeding(NEEDS.postgresUrl, NEEDS.redisServer)('a Redis Cluster (REDIS_CLUSTER_NODES)', () => {
  test('a Free key gets exactly 60 of 70 through two instances, whichever master its subject lands on', async ({
    engine,
    instances,
    clock,
  }) => {
    clock.advance(MINUTE);
    const [a, b] = instances;
    const keys = await freeKeysOnEachMaster(engine, () => a.app.apiKeysRepository.create({ plan: 'free', name: 'cluster' }));
    expect(keys.size).toBe(3);
    for (const [port, key] of keys) {
      expect({ port, statuses: await freeKeyRun([a, b], key) }).toEqual({ port, statuses: { 200: 60, 429: 10 } });
    }
    expect([await fallbackGauge(a), await fallbackGauge(b)]).toEqual([0, 0]);
  });

  test("a customer's two keys share its minute exactly through two instances: their subjects and the customer's share one slot (no CROSSSLOT)", async ({
    instances,
    clock,
  }) => {
    const [a, b] = instances;
    const customer = await createCustomerRules(a.app.db).create(
      { externalId: `cus_cluster_${randomUUID()}`, limits: { limits: minuteAndDay(10, 1_000), concurrency: null } },
      { actor: KEYS_COMMAND },
    );
    const keys = await Promise.all([1, 2].map(() => a.app.apiKeysRepository.create({ plan: 'free', customerId: customer.id })));
    for (const { key } of keys) await Promise.all([a, b].map((instance) => waitForKeyOnApp(instance.app, bearer(key))));
    clock.advance(MINUTE);
    const statuses: number[] = [];
    for (let i = 0; i < 20; i++) {
      const instance = [a, b][i % 2]!;
      statuses.push((await instance.app.inject({ url: '/v1/pets?limit=1', headers: bearer(keys[i % 2]!.key) })).statusCode);
    }
    expect(statuses).toEqual([...Array<number>(10).fill(200), ...Array<number>(10).fill(429)]);
    // Decided on the cluster all along: a CROSSSLOT error would have sent them to memory.
    expect([await fallbackGauge(a), await fallbackGauge(b)]).toEqual([0, 0]);
  });

  test("a customer's key's own balance of credits and its customer's are decided in its one script (no CROSSSLOT), exact through two instances", async ({
    instances,
    clock,
  }) => {
    const [a, b] = instances;
    const customer = await createCustomerRules(a.app.db).create(
      { externalId: `cus_cluster_credits_${randomUUID()}`, limits: { limits: minuteAndDay(100, 1_000), concurrency: null } },
      { actor: KEYS_COMMAND },
    );
    const [own, sibling, alone] = await Promise.all([
      a.app.apiKeysRepository.create({ plan: 'pro', customerId: customer.id }),
      a.app.apiKeysRepository.create({ plan: 'pro', customerId: customer.id }),
      a.app.apiKeysRepository.create({ plan: 'pro' }),
    ]);
    for (const { key } of [own, sibling, alone]) await Promise.all([a, b].map((instance) => waitForKeyOnApp(instance.app, bearer(key))));
    // The key's own 5, its customer's 8 (shared with its sibling), and a key without a customer's own 3.
    await insertBalance(a.app.db, { quotaId: own.record.quotaId }, 5);
    await insertBalance(a.app.db, { customerId: customer.id }, 8);
    await insertBalance(a.app.db, { quotaId: alone.record.quotaId }, 3);
    for (const instance of [a, b]) expect(await instance.app.keyNotices.catchUp()).toBe(true);
    clock.advance(MINUTE);
    const statusesOf = async (key: string, count: number) => {
      const statuses = [];
      for (let i = 0; i < count; i++) {
        const response = await [a, b][i % 2]!.app.inject({ url: '/v1/pets?limit=1', headers: bearer(key) });
        statuses.push(response.statusCode === 429 ? response.json<{ code: string }>().code : response.statusCode);
      }
      return statuses;
    };
    expect(await statusesOf(own.key, 6)).toEqual([200, 200, 200, 200, 200, 'credits_exhausted']);
    expect(await statusesOf(sibling.key, 4)).toEqual([200, 200, 200, 'credits_exhausted']);
    expect(await statusesOf(alone.key, 4)).toEqual([200, 200, 200, 'credits_exhausted']);
    // Decided on the cluster all along: a CROSSSLOT error would have sent them to memory.
    expect([await fallbackGauge(a), await fallbackGauge(b)]).toEqual([0, 0]);
  });

  test("fails no request while the master of the load key's slot fails over to its replica, and is exact again afterwards", async ({
    engine,
    instances,
    clock,
    load,
  }) => {
    clock.advance(MINUTE);
    const [a, b] = instances;
    // A key of the load's own, so that the master killed is the one its counters live on.
    const loadKey = await a.app.apiKeysRepository.create({ plan: 'enterprise', name: 'load', limits: minuteAndDay(1e9, 2e9) });
    await Promise.all([a, b].map((instance) => waitForKeyOnApp(instance.app, bearer(loadKey.key))));
    const victim = await masterOfQuota(engine, loadKey.record.quotaId);
    const running = load.start(bearer(loadKey.key));
    await eventually(async () => running.answered() >= 20);
    await engine.kill(victim.port);
    const failoverMs = await engine.waitUntilOk(30_000);
    const answeredByFailover = running.answered();
    await eventually(async () => running.answered() >= answeredByFailover + 20);
    const { statuses, slowestMs } = await running.stop();
    console.log(`cluster failover: ${failoverMs} ms; ${statuses.length} requests during it, slowest ${slowestMs} ms`);
    expect(statuses.length).toBeGreaterThan(20);
    expect(statuses.filter((status) => status !== 200)).toEqual([]);
    // Back on Redis (a probe finds every master answering), and exact across instances again.
    await eventually(async () => (await fallbackGauge(a)) === 0 && (await fallbackGauge(b)) === 0, 10_000);
    // One switch to memory and one back per instance at most, not one per request of the dead master's subjects.
    for (const { logs } of [a, b]) {
      const times = (text: string) => logs.lines.filter((line) => line.includes(text)).length;
      expect(times('Redis unreachable')).toBeLessThanOrEqual(1);
      expect(times('Redis is back')).toBe(times('Redis unreachable'));
    }
    clock.advance(MINUTE);
    const keys = await freeKeysOnEachMaster(engine, () => a.app.apiKeysRepository.create({ plan: 'free', name: 'cluster after' }));
    for (const [port, key] of keys) {
      expect({ port, statuses: await freeKeyRun([a, b], key) }).toEqual({ port, statuses: { 200: 60, 429: 10 } });
    }
  });
});
