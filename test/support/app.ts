import type { FastifyInstance } from 'fastify';
import { minuteAndDay } from '../../src/plans/limits.js';
import { buildApp, type AppDependencies } from '../../src/app.js';
import { loadConfig } from '../../src/config/load.js';
import type { Database } from '../../src/platform/db/database.js';
import { createScratchDatabase } from '../../harness/databases.js';
import { POSTGRES_URL } from './databases.js';
import { eventually } from './eventually.js';
import { bearer, keyNotices, waitForKeyOnApp } from './keys.js';
import { captureLogs } from './logs.js';

export interface TestApp {
  app: FastifyInstance;
  db: Database;
  /** The PostgreSQL URL of the app's database (undefined on PGlite), for a second instance on it. */
  databaseUrl?: string;
  /** Headers of an enterprise key whose limits (concurrency included) no test reaches. */
  auth: { authorization: string };
  logs: ReturnType<typeof captureLogs>;
  close: () => Promise<void>;
}

/**
 * The production app, built by the same buildApp from the same configuration, which opens a
 * database of the test's own: a fresh one on the PostgreSQL server, or an in-memory PGlite.
 */
export async function buildTestApp(env: Record<string, string> = {}, deps: AppDependencies = {}): Promise<TestApp> {
  const scratch = POSTGRES_URL ? await createScratchDatabase(POSTGRES_URL) : undefined;
  const logs = captureLogs();
  const config = loadConfig({
    DATABASE_URL: scratch?.url,
    DATA_DIR: 'memory://',
    PUBLIC_BASE_URL: 'https://api.example.test/v1',
    LOG_LEVEL: 'info',
    // A loaded machine stalls event loops for seconds; only the tests of load shedding shed. Off, not
    // merely high: under-pressure reads a second without a sample of the loop (a start on a busy
    // machine) as an infinite lag, and sheds the first requests of tests whatever the threshold.
    LOAD_SHED_EVENT_LOOP_DELAY_MS: '0',
    ...env,
  });
  const app = await buildApp(config, { logStream: logs.stream, ...deps });
  await app.ready();
  const noticed = await keyNotices(app);
  // Concurrency too: the plan's 100 in flight is reached by a test's 200 concurrent creates on PostgreSQL.
  const { key } = await app.apiKeysRepository.create({
    plan: 'enterprise',
    name: 'tests',
    limits: minuteAndDay(1e9, 2e9),
    concurrency: 100_000,
  });
  // The notice of the key's creation makes the cache check the key again: awaited here, so that
  // it cannot land in the middle of a test, and the key, once accepted, stays known.
  await eventually(async () => (await keyNotices(app)) > noticed);
  await waitForKeyOnApp(app, bearer(key));
  return {
    app,
    db: app.db,
    databaseUrl: config.DATABASE_URL,
    auth: bearer(key),
    logs,
    close: async () => {
      await app.close();
      await scratch?.drop();
    },
  };
}

/** Two instances of the app on one PostgreSQL database, as behind a load balancer. */
export async function buildTwoInstances(): Promise<{ a: TestApp; b: TestApp; close: () => Promise<void> }> {
  const a = await buildTestApp();
  const b = await buildTestApp({ DATABASE_URL: a.databaseUrl! });
  return {
    a,
    b,
    close: async () => {
      await b.close();
      await a.close();
    },
  };
}
