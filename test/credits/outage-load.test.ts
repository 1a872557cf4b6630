import { loadavg } from 'node:os';
import { describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { startServer } from '../../harness/processes.js';
import { createApiKeysRepository } from '../../src/api-keys/repository.js';
import { createCustomerRules } from '../../src/customers/rules.js';
import { KEYS_COMMAND } from '../support/admin.js';
import { balanceRecord, insertBalance } from '../support/credit-balances.js';
import { POSTGRES_URL } from '../support/databases.js';
import { eventually } from '../support/eventually.js';
import { withDatabaseAndRedis } from '../support/fixtures.js';
import { bearer, waitForKeyAt } from '../support/keys.js';
import { REDIS_URL } from '../support/redis.js';
import { minuteAndDay } from '../../src/plans/limits.js';

// Issue 54, finding 3: while Redis is unreachable, credits are decided in their record in
// PostgreSQL. One customer's load must not take the instance down (shed by the pool's waiting
// requests) nor slow another customer: a server process on PostgreSQL, its Redis refused, 160 of
// one customer's requests in flight, with the default LOAD_SHED_POOL_WAITING.

/** The hot customer's requests kept in flight at once. */
const IN_FLIGHT = 160;
/** Rounds of probes while the hot customer is loaded: each a key without credits, another customer's key and /readyz. */
const PROBES = 50;
/** Far more than the load spends: only an outage's handling can refuse it. */
const HOT_BALANCE = 1_000_000_000;

type Headers = { authorization: string };

/** Each status answered, counted. */
const tally = (statuses: number[]) =>
  statuses.reduce<Record<number, number>>((counts, s) => ({ ...counts, [s]: (counts[s] ?? 0) + 1 }), {});

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

type Timed = { status: number; ms: number };

const statusesOf = (answers: Timed[]) => tally(answers.map(({ status }) => status));
const p50 = (answers: Timed[]) => median(answers.map(({ ms }) => ms)).toFixed(1);

/** A request answered: its status and how long it took (ms). */
async function timed(url: string, headers?: Headers): Promise<Timed> {
  const started = performance.now();
  const response = await fetch(url, { headers });
  await response.arrayBuffer();
  return { status: response.status, ms: performance.now() - started };
}

/** A server on a fresh database and a private Redis it can be cut off from; a hot customer, another, and a key without credits. */
async function serverOfThreeCustomers() {
  return withDatabaseAndRedis(async ({ database, redis }, defer) => {
    const admin = new Redis(redis.url);
    defer(() => admin.disconnect());
    const customers = createCustomerRules(database.db);
    const keys = createApiKeysRepository(database.db);
    // Limits and slots far above the load: only the credits, or shedding, could refuse.
    const settings = { plan: 'enterprise', limits: minuteAndDay(1e9, 2e9), concurrency: 100_000 } as const;
    const hot = await customers.create({ externalId: 'cus_hot', limits: null }, { actor: KEYS_COMMAND });
    const other = await customers.create({ externalId: 'cus_other', limits: null }, { actor: KEYS_COMMAND });
    const hotKey = await keys.create({ ...settings, customerId: hot.id });
    const otherKey = await keys.create({ ...settings, customerId: other.id });
    const plainKey = await keys.create(settings);
    const hotBalance = await insertBalance(database.db, { customerId: hot.id }, HOT_BALANCE);
    const otherBalance = await insertBalance(database.db, { customerId: other.id }, 1_000_000);
    const server = await startServer({
      name: 'credits-outage-load',
      env: { DATABASE_URL: database.url!, REDIS_URL: redis.url, REDIS_KEY_PREFIX: 'credits-outage-load:' },
    });
    defer(() => server.stop('SIGKILL'));
    const headers = { hot: bearer(hotKey.key), other: bearer(otherKey.key), plain: bearer(plainKey.key) };
    for (const each of Object.values(headers)) await waitForKeyAt(server.origin, each);
    const spent = (id: number) => balanceRecord(database.db, id).then(({ spent }) => spent);
    const cut = async () => {
      // Connections killed and a password the server does not know: it cannot come back.
      await admin.config('SET', 'requirepass', 'outage');
      await admin.client('KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
      await fetch(`${server.origin}/v1/pets?limit=1`, { headers: headers.plain });
      await eventually(async () => server.output().includes('Redis unreachable; limiting per instance from memory'));
    };
    return { server, headers, cut, spent: { hot: () => spent(hotBalance), other: () => spent(otherBalance) } };
  });
}

describe.skipIf(!POSTGRES_URL || !REDIS_URL)("credits while Redis is unreachable, under one customer's load (a server process)", () => {
  it(
    `${IN_FLIGHT} of one customer's requests in flight: a key without credits, another customer's key and /readyz all answer; every unit served is recorded`,
    { timeout: 180_000 },
    async ({ annotate }) => {
      const { server, headers, cut, spent } = await serverOfThreeCustomers();
      const pets = `${server.origin}/v1/pets?limit=1`;
      await cut();
      // What waitForKeyAt spent on Redis, written to the record by the ledger.
      await eventually(async () => (await spent.hot()) === 1 && (await spent.other()) === 1);
      const alone = [];
      for (let i = 0; i < 20; i++) alone.push(await timed(pets, headers.other));

      let loading = true;
      const hot: number[] = [];
      const load = Promise.all(
        Array.from({ length: IN_FLIGHT }, async () => {
          while (loading) hot.push((await timed(pets, headers.hot)).status);
        }),
      );
      // The probes begin once the load is under way: every worker's first answer is in.
      await eventually(async () => hot.length >= IN_FLIGHT, 60_000);
      const startedAt = performance.now();
      const servedBefore = hot.filter((status) => status === 200).length;
      const probes = { plain: [] as Timed[], other: [] as Timed[], readyz: [] as number[] };
      for (let i = 0; i < PROBES; i++) {
        probes.plain.push(await timed(pets, headers.plain));
        probes.other.push(await timed(pets, headers.other));
        probes.readyz.push((await timed(`${server.origin}/readyz`)).status);
      }
      const seconds = (performance.now() - startedAt) / 1000;
      const servedDuring = hot.filter((status) => status === 200).length - servedBefore;
      loading = false;
      await load;
      server.assertRunning();

      const summary =
        `credits in a Redis outage, ${IN_FLIGHT} of one customer's requests in flight on one instance: ` +
        `the hot customer served ${Math.round(servedDuring / seconds)} requests/s (${servedDuring} in ${seconds.toFixed(1)} s); ` +
        `another customer's p50 ${p50(probes.other)} ms under the load (${p50(alone)} ms alone), a key without credits' ${p50(probes.plain)} ms; ` +
        `probes: a key without credits ${JSON.stringify(statusesOf(probes.plain))}, another customer's key ${JSON.stringify(statusesOf(probes.other))}, ` +
        `/readyz ${JSON.stringify(tally(probes.readyz))}; the hot customer's answers ${JSON.stringify(tally(hot))}; load average ${loadavg()[0]!.toFixed(1)}`;
      // A measurement, not a pass mark: shown by the verbose reporter, and with a failure.
      await annotate(summary);
      expect(statusesOf(probes.plain)).toEqual({ 200: PROBES });
      expect(statusesOf(probes.other)).toEqual({ 200: PROBES });
      expect(tally(probes.readyz)).toEqual({ 200: PROBES });
      expect(tally(hot)).toEqual({ 200: hot.length });
      expect(statusesOf(alone)).toEqual({ 200: alone.length });
      // Spent in the record as served: exactly, one unit for each 200.
      expect(await spent.hot()).toBe(1 + hot.length);
      expect(await spent.other()).toBe(1 + alone.length + PROBES);
    },
  );
});
