import { describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { startServer, type ServerProcess } from '../../harness/processes.js';
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

// Issue 48: credits are money. Two server processes on one PostgreSQL and one Redis (a private
// server, flushed and left behind by these tests) spend one customer's 1,000 units: exactly 1,000
// are served, also across a FLUSHALL once the record has caught up, and after one of them is SIGKILLed.

const BALANCE = 1_000;
/** Requests each client keeps in flight against its server. */
const WORKERS = 4;

/** One client of one server, sending reads with WORKERS in flight and counting what was served. */
class Spender {
  served = 0;

  constructor(
    readonly server: ServerProcess,
    readonly headers: { authorization: string },
  ) {}

  /** Sends until `stop()` says so or the credits are refused; resolves once every request sent is answered. */
  async run(stop: () => boolean) {
    await Promise.all(
      Array.from({ length: WORKERS }, async () => {
        while (!stop()) {
          const response = await fetch(`${this.server.origin}/v1/pets?limit=1`, { headers: this.headers });
          const body = (await response.json()) as { code?: string };
          if (response.status === 200) {
            this.served++;
          } else if (response.status === 429 && body.code === 'credits_exhausted') return;
          else throw new Error(`${this.server.name} answered ${response.status} ${JSON.stringify(body)}`);
        }
      }),
    );
  }
}

/** Two servers on a fresh database and a private Redis (one key prefix), a customer with a balance of 1,000 and a key each. */
async function twoServersSpending() {
  return withDatabaseAndRedis(async ({ database, redis }, defer) => {
    const customer = await createCustomerRules(database.db).create({ externalId: 'cus_instances', limits: null }, { actor: KEYS_COMMAND });
    const keys = createApiKeysRepository(database.db);
    // Limits far above the balance: only the credits refuse.
    const settings = { plan: 'enterprise', limits: minuteAndDay(100_000, 1_000_000), customerId: customer.id } as const;
    const issued = [await keys.create(settings), await keys.create(settings)];
    const balanceId = await insertBalance(database.db, { customerId: customer.id }, BALANCE);
    const env = { DATABASE_URL: database.url!, REDIS_URL: redis.url, REDIS_KEY_PREFIX: 'credits:' };
    const servers: ServerProcess[] = [];
    for (const name of ['a', 'b']) {
      const server = await startServer({ name: `credits-${name}`, env });
      defer(() => server.stop('SIGKILL'));
      servers.push(server);
    }
    const [a, b] = servers.map((server, i) => new Spender(server, bearer(issued[i]!.key))) as [Spender, Spender];
    for (const { server, headers } of [a, b]) await waitForKeyAt(server.origin, headers);
    const total = () => a.served + b.served;
    // waitForKeyAt's own reads spent some: what the record says once they are written.
    const spent = () => balanceRecord(database.db, balanceId).then((record) => record.spent);
    return { redis: redis.url, a, b, total, spent };
  });
}

/** What the probes of waitForKeyAt spent before the spenders started: the record once both servers wrote it (no sleep: polled). */
async function spentByProbes(spent: () => Promise<number>) {
  await eventually(async () => (await spent()) >= 2);
  return spent();
}

describe.skipIf(!POSTGRES_URL || !REDIS_URL)('credits across two server processes on one PostgreSQL and one Redis', () => {
  it("spend one customer's 1,000 units concurrently: exactly 1,000 served; the record holds 1,000", async () => {
    const { a, b, total, spent } = await twoServersSpending();
    const probes = await spentByProbes(spent);
    await Promise.all([a.run(() => false), b.run(() => false)]);
    expect(total() + probes).toBe(BALANCE);
    expect(a.served).toBeGreaterThan(0);
    expect(b.served).toBeGreaterThan(0);
    await eventually(async () => (await spent()) === BALANCE);
  });

  it('a FLUSHALL once the record has caught up: the balance is seeded from the record, and the rest served is exact', async () => {
    const { a, b, total, spent, redis } = await twoServersSpending();
    const probes = await spentByProbes(spent);
    const midway = () => total() + probes >= 400;
    await Promise.all([a.run(midway), b.run(midway)]);
    const before = total() + probes;
    await eventually(async () => (await spent()) === before);
    const client = new Redis(redis);
    await client.flushall();
    client.disconnect();
    await Promise.all([a.run(() => false), b.run(() => false)]);
    expect(total() + probes).toBe(BALANCE);
  });

  it('a FLUSHALL under load: at most the spending not yet written is served again (the bound of docs/decisions/credits.md)', async ({
    annotate,
  }) => {
    const { a, b, total, spent, redis } = await twoServersSpending();
    const probes = await spentByProbes(spent);
    const client = new Redis(redis);
    let bound: number | undefined;
    const flushing = (async () => {
      await eventually(async () => total() + probes >= 400);
      const recorded = await spent();
      await client.flushall();
      // Served by the flush: those answered, and those in flight (decided before it, perhaps).
      bound = total() + probes + 2 * WORKERS - recorded;
    })();
    await Promise.all([a.run(() => false), b.run(() => false), flushing]);
    client.disconnect();
    const served = total() + probes;
    // Measurements, not pass marks: shown by the verbose reporter, and with a failure.
    await annotate(
      `credits across a FLUSHALL under load: ${served} served of ${BALANCE}, the bound ${bound} (unrecorded at the flush, and in flight)`,
    );
    expect(served).toBeGreaterThanOrEqual(BALANCE);
    expect(served - BALANCE).toBeLessThanOrEqual(bound!);
  });

  it('a SIGKILL of one server midway: the other goes on, exactly 1,000 served in all; the record converges to all 1,000', async ({
    annotate,
  }) => {
    const { a, b, total, spent } = await twoServersSpending();
    const probes = await spentByProbes(spent);
    const upTo = (units: number) => () => total() + probes >= units;
    await Promise.all([a.run(upTo(400)), b.run(upTo(400))]);
    const caughtUp = total() + probes;
    await eventually(async () => (await spent()) === caughtUp);
    // a alone spends 100 more, then is killed at once: every request it sent is answered, its last writes are not all made.
    await a.run(upTo(500));
    expect(await a.server.stop('SIGKILL')).toBeNull();
    await b.run(() => false);
    // Redis kept the live balance: what a spent is not handed out again.
    expect(total() + probes).toBe(BALANCE);
    // Finding 5 of issue 54: b follows the live balance, so what a served and never wrote reaches the record.
    const converged = await eventually(async () => (await spent()) === BALANCE);
    await annotate(
      `credits across a SIGKILL: ${total() + probes} served in all (a ${a.served}, b ${b.served}); recorded ${BALANCE} ${converged} ms after b's last`,
    );
  });
});
