import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { onTestFinished, test as base, type RunnerTestSuite } from 'vitest';
import type { AppDependencies } from '../../src/app.js';
import { migrate } from '../../src/platform/db/migrate.js';
import { buildTestApp, buildTwoInstances, type TestApp } from './app.js';
import { createTestDatabase } from './databases.js';
import { startRedis } from './redis.js';
import { listen, portOf } from './http.js';
import { T0, testClock, type TestClock } from './time.js';

export { expect } from 'vitest';

export interface AppTestOptions {
  /** Settings on top of the test app's (see buildTestApp). */
  env?: Record<string, string>;
  /** The app reads its time from the `clock` fixture, starting here, instead of the real clock. */
  clock?: number;
  /** With `clock`: every reading of the clock is this many milliseconds later than the last. */
  clockStep?: number;
  /** Builds the environment when the app is built, not when the file is collected (fresh Redis prefixes). */
  envAtBuild?: () => Record<string, string>;
  deps?: AppDependencies;
  /** `request` sends no key unless a test gives one (by default it sends the app's). */
  anonymous?: boolean;
}

function openApp({ env = {}, clock: start, clockStep, envAtBuild, deps = {} }: AppTestOptions, clock: TestClock) {
  const now = clockStep === undefined ? clock.now : () => clock.advance(clockStep);
  return buildTestApp({ ...env, ...envAtBuild?.() }, start === undefined ? deps : { now, ...deps });
}

/**
 * A test API whose tests get `t`, one app for the whole file (or for as many tests as use this
 * API), built by buildTestApp on first use and closed after the file's last test; `clock` is
 * the time it reads when options.clock is given; `request` speaks real HTTP to it with its key;
 * `port` is the loopback port it listens on.
 * Each call gives a new API with an app of its own, for files that need differently set up apps;
 * so does each .extend of it: a file uses one API built from a call, not the call and its extension.
 */
export function appTest(options: AppTestOptions = {}) {
  return base
    .extend('clock', { scope: 'file' }, () => testClock(options.clock ?? T0))
    .extend('t', { scope: 'file' }, async ({ clock }, { onCleanup }) => {
      const t = await openApp(options, clock);
      onCleanup(() => t.close());
      return t;
    })
    .extend('request', { scope: 'file' }, async ({ t }) => listen(t.app, options.anonymous ? {} : t.auth))
    .extend('port', { scope: 'file' }, async ({ t }) => portOf(t.app));
}

/**
 * The apps of describeAppTest by describe block, closed at the end of the file if still open.
 * Defined here, at the top level of every file that imports it: a file-scoped fixture cannot be
 * defined inside a describe block, where describeAppTest may be called.
 */
const withOpenApps = base.extend(
  'openApps',
  { scope: 'file' },
  // eslint-disable-next-line no-empty-pattern -- vitest reads a fixture's dependencies from this pattern
  ({}, { onCleanup }) => {
    const apps = new Map<RunnerTestSuite, Promise<{ clock: TestClock; t: TestApp }>>();
    onCleanup(async () => {
      await Promise.allSettled([...apps.values()].map(async (opened) => (await opened).t.close()));
    });
    return apps;
  },
);

/** The last of a describe block's own tests that runs. */
const lastTestOf = (suite: RunnerTestSuite) => suite.tasks.findLast((task) => task.type === 'test' && task.mode === 'run');

/**
 * Like appTest, but with an app (and a clock) per describe block, as beforeAll and afterAll in
 * the block would give: built for the first of the block's own tests made with this API, closed
 * after the last test of the block that runs (at the end of the file if that one was made with
 * another API). For files whose blocks need apps set up differently (describe.each over stores),
 * or apps of their own, and should not keep each block's app until the end of the file. May be
 * called inside a describe block.
 */
export function describeAppTest(options: AppTestOptions = {}) {
  return (
    withOpenApps
      // Every test of the block made with this API holds the app, so that the last of them closes it.
      .extend('opened', { auto: true }, async ({ openApps, task }, { onCleanup }) => {
        const suite = task.suite ?? task.file;
        let opened = openApps.get(suite);
        if (!opened) {
          const clock = testClock(options.clock ?? T0);
          opened = openApp(options, clock).then((t) => ({ clock, t }));
          openApps.set(suite, opened);
        }
        onCleanup(async () => {
          if (lastTestOf(suite) !== task) return;
          openApps.delete(suite);
          await opened.then(({ t }) => t.close()).catch(() => {});
        });
        return opened;
      })
      .extend('clock', ({ opened }) => opened.clock)
      .extend('t', ({ opened }) => opened.t)
      .extend('request', async ({ t }) => listen(t.app, options.anonymous ? {} : t.auth))
      .extend('port', async ({ t }) => portOf(t.app))
  );
}

/** A test API whose tests get `instances`: two apps on one PostgreSQL database, built on first use. */
export const twoInstancesTest = () =>
  // eslint-disable-next-line no-empty-pattern -- vitest reads a fixture's dependencies from this pattern
  base.extend('instances', { scope: 'file' }, async ({}, { onCleanup }) => {
    const instances = await buildTwoInstances();
    onCleanup(() => instances.close());
    return instances;
  });

/** A test API whose tests get `database`: a migrated database of the file's own (see createTestDatabase). */
export const databaseTest = ({ migrated = true } = {}) =>
  // eslint-disable-next-line no-empty-pattern -- vitest reads a fixture's dependencies from this pattern
  base.extend('database', { scope: 'file' }, async ({}, { onCleanup }) => {
    const database = await createTestDatabase();
    onCleanup(() => database.drop());
    if (migrated) await migrate(database.db);
    return database;
  });

/** A test API whose tests get `dir`: an empty temporary directory of the file's own (named from `prefix`), removed after its last test. */
export const tempDirTest = (prefix: string) =>
  // eslint-disable-next-line no-empty-pattern -- vitest reads a fixture's dependencies from this pattern
  base.extend('dir', { scope: 'file' }, async ({}, { onCleanup }) => {
    const dir = await mkdtemp(join(tmpdir(), prefix));
    onCleanup(() => rm(dir, { recursive: true, force: true }));
    return dir;
  });

/**
 * For a fixture that sets up several things: `setUp` defers each one's undoing as it is made; all
 * run (the last made first) at the fixture's one onCleanup, or at once when setUp fails half way,
 * for vitest runs the cleanup of a fixture only once it has returned.
 */
export async function cleanupStack<T>(
  onCleanup: (cleanup: () => Promise<void>) => void,
  setUp: (defer: (each: () => unknown) => void) => Promise<T>,
): Promise<T> {
  const undo: Array<() => unknown> = [];
  const undoAll = async () => {
    for (const each of undo.splice(0).reverse()) await Promise.resolve(each()).catch(() => {});
  };
  onCleanup(undoAll);
  try {
    return await setUp((each) => void undo.push(each));
  } catch (error) {
    await undoAll();
    throw error;
  }
}

/**
 * cleanupStack's setUp for server processes on engines of their own: a fresh migrated database on
 * the PostgreSQL server and a private Redis (dropped and stopped in reverse, with whatever `setUp` deferred).
 */
export async function withDatabaseAndRedis<T>(
  setUp: (
    engines: { database: Awaited<ReturnType<typeof createTestDatabase>>; redis: Awaited<ReturnType<typeof startRedis>> },
    defer: (each: () => unknown) => void,
  ) => Promise<T>,
): Promise<T> {
  return cleanupStack(
    (undo) => onTestFinished(undo),
    async (defer) => {
      const database = await createTestDatabase();
      defer(() => database.drop());
      await migrate(database.db);
      const redis = await startRedis();
      defer(() => redis.stop());
      return setUp({ database, redis }, defer);
    },
  );
}
