import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { createScratchDatabase } from '../../harness/databases.js';
import { openAdmin, type TestAdmin } from './admin.js';
import { buildTestApp, type TestApp } from './app.js';
import { POSTGRES_URL } from './databases.js';
import { eventually } from './eventually.js';
import { startRedis } from './redis.js';
import { T0, testClock } from './time.js';

/** The writes a fault makes fail: the credits ledger's batch of spending, or the usage record's. */
export type FailingWrite = 'ledger' | 'usage';

/** What the service logs when a write of each kind failed and its counts were kept for the next. */
const FAILURE_LOGS: Record<FailingWrite, string> = {
  ledger: 'credits: writing the spending failed; kept for the next write',
  usage: 'usage: writing the usage record failed; its counts are kept for the next write',
};

/**
 * Real failures of the two batched writes: triggers that raise while a flag row is set. The
 * ledger's is on updates of `spent` alone (same base and version): the batch of spending, not an
 * admin operation or a refill, which move the base or the version.
 */
const FAULTS = [
  'CREATE TABLE model_faults (name text PRIMARY KEY)',
  `CREATE FUNCTION model_fault() RETURNS trigger LANGUAGE plpgsql AS $$
   BEGIN
     IF EXISTS (SELECT 1 FROM model_faults WHERE name = TG_ARGV[0]) THEN RAISE EXCEPTION 'model: the % write fails', TG_ARGV[0]; END IF;
     RETURN NEW;
   END $$`,
  `CREATE TRIGGER model_ledger_fault BEFORE UPDATE OF spent ON credit_balances FOR EACH ROW
   WHEN (OLD.base = NEW.base AND OLD.version = NEW.version) EXECUTE FUNCTION model_fault('ledger')`,
  `CREATE TRIGGER model_usage_fault BEFORE INSERT OR UPDATE ON usage_hours FOR EACH ROW EXECUTE FUNCTION model_fault('usage')`,
];

export interface ModelServiceOptions {
  /** Limits in a private Redis server (which a flush may empty), else in each instance's memory. */
  redis: boolean;
  /** Settings on top of the test app's. */
  env?: Record<string, string>;
}

/**
 * The service a model-based test drives: one instance at a time (buildTestApp, the app's clock) on a
 * database that outlives it (a PGlite data directory, or a database of its own on PostgreSQL), with
 * its admin listener; restarted gracefully, or killed (its unwritten ledger and usage lost), and on
 * Redis a private server that may be flushed.
 */
export async function openModelService({ redis: withRedis, env = {} }: ModelServiceOptions) {
  const clock = testClock(T0);
  const scratch = POSTGRES_URL ? await createScratchDatabase(POSTGRES_URL) : undefined;
  const dir = scratch ? undefined : await mkdtemp(join(tmpdir(), 'credits-model-'));
  const redis = withRedis ? await startRedis() : undefined;
  const settings = {
    ...env,
    ...(scratch ? { DATABASE_URL: scratch.url } : { DATA_DIR: dir! }),
    ...(redis ? { REDIS_URL: redis.url, REDIS_KEY_PREFIX: 'credits-model:' } : {}),
  };
  const open = async () => {
    const t = await buildTestApp(settings, { now: clock.now });
    return { t, admin: await openAdmin(t.app) };
  };
  let current: { t: TestApp; admin: TestAdmin } = await open();
  for (const statement of FAULTS) await current.t.db.query(statement);
  const stop = async () => {
    await current.admin.close();
    await current.t.close();
  };
  const setFault = async (write: FailingWrite, on: boolean) => {
    await current.t.db.query(
      on ? 'INSERT INTO model_faults (name) VALUES ($1) ON CONFLICT DO NOTHING' : 'DELETE FROM model_faults WHERE name = $1',
      [write],
    );
  };
  const failures = (write: FailingWrite) => current.t.logs.lines.filter((line) => line.includes(FAILURE_LOGS[write])).length;

  return {
    clock,
    get t() {
      return current.t;
    },
    get admin() {
      return current.admin;
    },
    /** A graceful restart: the instance closes (writing what it holds), a new one starts on the same database and store. */
    async restart() {
      await stop();
      current = await open();
    },
    /** `work` while the writes fail (the triggers raise). */
    async failing<T>(writes: FailingWrite[], work: () => Promise<T>): Promise<T> {
      for (const write of writes) await setFault(write, true);
      try {
        return await work();
      } finally {
        for (const write of writes) await setFault(write, false);
      }
    },
    /** Resolves once the instance has logged more failures of the write than `before`. */
    failedSince: (write: FailingWrite, before: number) => eventually(async () => failures(write) > before),
    failures,
    /**
     * The instance dies with what it has not written (as a SIGKILL would leave it): it closes while
     * both writes fail, so its ledger's unwritten spending and its unwritten usage are lost; a new
     * one starts on the same database and store.
     */
    async kill() {
      for (const write of ['ledger', 'usage'] as const) await setFault(write, true);
      await stop();
      current = await open();
      for (const write of ['ledger', 'usage'] as const) await setFault(write, false);
    },
    /** Empties the private Redis server, as a FLUSHALL or a restart without persistence would. */
    async flushRedis() {
      const client = new Redis(redis!.url);
      try {
        await client.flushall();
      } finally {
        client.disconnect();
      }
    },
    async close() {
      await stop().catch(() => {});
      await redis?.stop();
      await scratch?.drop();
      if (dir) await rm(dir, { recursive: true, force: true });
    },
  };
}

export type ModelService = Awaited<ReturnType<typeof openModelService>>;
