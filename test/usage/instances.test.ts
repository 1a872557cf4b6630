/**
 * The usage record across instances (issue 48): two real server processes on one PostgreSQL and
 * one Redis, each counting in memory and adding its counts to the record, one stopped with SIGTERM
 * midway. What the record holds adds up to exactly what the callers saw.
 */
import { describe, test as base } from 'vitest';
import { createApiKeysRepository } from '../../src/api-keys/repository.js';
import { createScratchDatabase, openExistingDatabase } from '../../harness/databases.js';
import { migrate } from '../../src/platform/db/migrate.js';
import { startServer, type ServerProcess } from '../../harness/processes.js';
import { deleteKeys } from '../../harness/redis.js';
import { POSTGRES_URL } from '../support/databases.js';
import { cleanupStack, expect } from '../support/fixtures.js';
import { REDIS_URL, redisStoreEnv } from '../support/redis.js';
import { sqlAt } from '../support/scale.js';
import { minuteAndDay } from '../../src/plans/limits.js';

/** Requests answered in all, across both instances. */
const REQUESTS = 1_000;
/** Callers at once, half of them starting on each instance. */
const CALLERS = 8;
/** The first instance is stopped once this many requests were answered. */
const STOP_AFTER = 400;

const test = base.extend(
  'cluster',
  { scope: 'file' }, // eslint-disable-next-line no-empty-pattern -- vitest reads a fixture's dependencies from this pattern
  async ({}, { onCleanup }) =>
    cleanupStack(onCleanup, async (defer) => {
      const scratch = await createScratchDatabase(POSTGRES_URL!);
      defer(() => scratch.drop());
      // The keys are in the database before the servers start, so that each knows them from its first request.
      const db = await openExistingDatabase({ url: scratch.url });
      let keys: string[];
      try {
        await migrate(db);
        const repository = createApiKeysRepository(db);
        // One key whose limits no caller reaches, one whose minute (shared in Redis) its callers spend, and are refused past, then banned.
        const roomy = await repository.create({ plan: 'enterprise', name: 'roomy', limits: minuteAndDay(1e9, 2e9) });
        const tight = await repository.create({ plan: 'enterprise', name: 'tight', limits: minuteAndDay(150, 1e6) });
        keys = [roomy.key, tight.key];
      } finally {
        await db.close();
      }
      const redis = redisStoreEnv();
      defer(() => deleteKeys(REDIS_URL!, redis.REDIS_KEY_PREFIX));
      const env = { DATABASE_URL: scratch.url, ...redis };
      const first = await startServer({ name: 'usage-a', env, readyPath: '/readyz' });
      defer(() => first.stop('SIGKILL'));
      const second = await startServer({ name: 'usage-b', env, readyPath: '/readyz' });
      defer(() => second.stop('SIGKILL'));
      return { url: scratch.url, servers: [first, second] as const, keys };
    }),
);

interface Tally {
  byStatus: Record<number, number>;
  answered: number;
  /** Answers (503s aside) by instance. */
  byInstance: [number, number];
  errors: number;
}

/**
 * CALLERS callers, each on its instance until that one stops answering (a refused connection or
 * the 503 of one closing), then on the other, until REQUESTS requests were answered; `onAnswered`
 * hears each answered count. Only answers count: a request the stopped instance never took is sent again.
 */
async function callers(servers: readonly ServerProcess[], keys: string[], onAnswered: (answered: number) => void): Promise<Tally> {
  const tally: Tally = { byStatus: {}, answered: 0, byInstance: [0, 0], errors: 0 };
  let claimed = 0;
  const gone = new Set<number>();
  await Promise.all(
    Array.from({ length: CALLERS }, async (_, caller) => {
      let instance = caller % 2;
      const authorization = `Bearer ${keys[caller % keys.length]}`;
      while (claimed < REQUESTS) {
        claimed++;
        if (gone.has(instance)) instance = 1 - instance;
        const status = await fetch(`${servers[instance]!.origin}/v1/pets?limit=1`, { headers: { authorization } }).then(
          async (response) => (await response.arrayBuffer(), response.status),
          () => undefined,
        );
        if (status === undefined || status === 503) {
          // Not answered by the service: sent again, to the other instance.
          claimed--;
          tally.errors += status === undefined ? 1 : 0;
          gone.add(instance);
        }
        if (status === undefined) continue;
        tally.byStatus[status] = (tally.byStatus[status] ?? 0) + 1;
        if (status === 503) continue;
        tally.byInstance[instance]!++;
        onAnswered(++tally.answered);
      }
    }),
  );
  return tally;
}

describe.skipIf(!POSTGRES_URL || !REDIS_URL)('the usage record of two instances on one PostgreSQL and one Redis', () => {
  test(`${REQUESTS} requests over both, the first stopped with SIGTERM midway: the record's requests are the 2xx answers, its refusals the 429s`, async ({
    cluster: { url, servers, keys },
    annotate,
  }) => {
    let stopped: Promise<number | null> | undefined;
    const tally = await callers(servers, keys, (answered) => {
      if (answered === STOP_AFTER) stopped = servers[0].stop('SIGTERM');
    });
    // The second stops too: what it counted since its last write is written as it closes.
    const codes = await Promise.all([stopped, servers[1].stop('SIGTERM')]);
    const [recorded] = await sqlAt<{ requests: number; refused: number; rows: number }>(
      url,
      `SELECT sum(requests)::int AS requests,
              sum(refused_rate_limited + refused_concurrency + refused_credits + refused_banned)::int AS refused, count(*)::int AS rows
       FROM usage_hours`,
    );
    const ok = tally.byStatus[200] ?? 0;
    const refusals = tally.byStatus[429] ?? 0;
    // A measurement, not a pass mark: shown by the verbose reporter, and with a failure.
    await annotate(
      `usage across instances: answers ${JSON.stringify(tally.byStatus)}, by instance ${tally.byInstance.join(' and ')}, ${tally.errors} connection errors; ` +
        `recorded ${recorded!.requests} requests and ${recorded!.refused} refusals in ${recorded!.rows} rows`,
    );

    expect(codes).toEqual([0, 0]);
    expect(tally.answered).toBe(REQUESTS);
    // Both served, the second the rest once the first had stopped.
    expect(tally.byInstance[0]).toBeGreaterThan(0);
    expect(tally.byInstance[0]).toBeLessThan(REQUESTS - STOP_AFTER);
    // Nothing but served and refused requests, and the 503s of the instance closing (counted by neither side).
    expect(Object.keys(tally.byStatus).filter((status) => !['200', '429', '503'].includes(status))).toEqual([]);
    expect(refusals).toBeGreaterThan(0);
    expect(recorded).toMatchObject({ requests: ok, refused: refusals });
  });
});
