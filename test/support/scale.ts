import pg from 'pg';
import { test as base } from 'vitest';
import { buildMetricsServer } from '../../src/platform/observability/metrics-server.js';
import { buildTestApp, type TestApp } from './app.js';
import { bearer } from './keys.js';
import { sleep, T0, testClock } from './time.js';

// What the tests on the real engines (issue #20) share: two instances on one clock, the limiter's
// fallback gauge, a Free key's run, and a steady load that stops with its test.

/** The rate limiter's `rate_limit_redis_fallback` gauge of an app: 1 while it limits from memory. */
export const fallbackGauge = async (t: TestApp) => {
  const text = (await buildMetricsServer(t.app.metricsRegistry).inject('/metrics')).body;
  return Number(/^rate_limit_redis_fallback (\d+)$/m.exec(text)?.[1]);
};

/** 70 requests of a Free key, alternating between the instances: the statuses, counted. */
export async function freeKeyRun(instances: TestApp[], key: string) {
  const statuses: Record<number, number> = {};
  for (let i = 0; i < 70; i++) {
    const { statusCode } = await instances[i % instances.length]!.app.inject({ url: '/v1/pets?limit=1', headers: bearer(key) });
    statuses[statusCode] = (statuses[statusCode] ?? 0) + 1;
  }
  return statuses;
}

/**
 * A test API whose tests get `engine`, started once for the file and closed after its last test;
 * `instances`, two apps sharing one PostgreSQL database and one clock (`clock`, which no window
 * rolls over unless a test moves it), set up for the engine by `env`; and `load`, which sends
 * requests from both, one after another, until stopped (or until the test ends, whatever failed).
 */
export function twoInstancesOn<Engine extends { close(): Promise<void> }>(
  startEngine: () => Promise<Engine>,
  env: (engine: Engine) => Record<string, string>,
) {
  return (
    base
      // eslint-disable-next-line no-empty-pattern -- vitest reads a fixture's dependencies from this pattern
      .extend('engine', { scope: 'file' }, async ({}, { onCleanup }) => {
        const engine = await startEngine();
        onCleanup(() => engine.close());
        return engine;
      })
      .extend('clock', { scope: 'file' }, () => testClock(T0 + 30_000))
      .extend('instances', { scope: 'file' }, async ({ engine, clock }, { onCleanup }) => {
        const settings = env(engine);
        const a = await buildTestApp(settings, { now: clock.now });
        const b = await buildTestApp({ ...settings, DATABASE_URL: a.databaseUrl! }, { now: clock.now });
        onCleanup(async () => void (await Promise.all([b.close(), a.close()])));
        return [a, b] as const;
      })
      .extend('load', async ({ instances }, { onCleanup }) => {
        let running = false;
        let done: Promise<void> = Promise.resolve();
        const stop = async () => {
          running = false;
          await done;
        };
        onCleanup(stop);
        return {
          /** Every status seen, and the slowest answer, once stopped; `answered` counts them as it goes. */
          start(headers: { authorization: string }) {
            const statuses: number[] = [];
            let slowestMs = 0;
            running = true;
            done = (async () => {
              for (let i = 0; running; i++) {
                const started = Date.now();
                const { statusCode } = await instances[i % 2]!.app.inject({ url: '/v1/pets?limit=1', headers });
                slowestMs = Math.max(slowestMs, Date.now() - started);
                statuses.push(statusCode);
                await sleep(5);
              }
            })();
            return { answered: () => statuses.length, stop: async () => (await stop(), { statuses, slowestMs }) };
          },
        };
      })
  );
}

/** One statement on a connection of its own, for what a test does beside the service (an operator, a check). */
export async function sqlAt<Row extends pg.QueryResultRow>(url: string, text: string, values: unknown[] = []): Promise<Row[]> {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => {});
  await client.connect();
  try {
    return (await client.query<Row>(text, values)).rows;
  } finally {
    await client.end();
  }
}

/**
 * Loops of requests, `concurrency` at a time, each running `step` until stopped; `stopAll` ends
 * those a failed test left running (call it from the test's cleanup).
 */
export function workerPool() {
  const running = new Set<() => Promise<void>>();
  return {
    start: (concurrency: number, step: (worker: number, round: number) => Promise<void>) => {
      let going = true;
      const workers = Array.from({ length: concurrency }, async (_, worker) => {
        for (let round = 0; going; round++) await step(worker, round);
      });
      const stop = async () => {
        going = false;
        running.delete(stop);
        await Promise.all(workers);
      };
      running.add(stop);
      return stop;
    },
    stopAll: async () => void (await Promise.all([...running].map((stop) => stop()))),
  };
}
