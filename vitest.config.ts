import { configDefaults, defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    // Each file gets its own database; PGlite and real processes need time to start.
    pool: 'forks',
    // A file per core: Vitest's default keeps a core free, which on 2 cores runs one file at a time
    // while the other core idles as tests wait on the database and on timers.
    maxWorkers: '100%',
    // Memory tests collect garbage before they measure, so they compare what is really held.
    // --liftoff-only: a test process opens PGlite for seconds, not hours, and V8's optimising
    // compiler of its WASM cost more CPU than it saved (as for the keys command, docs/api-keys.md).
    execArgv: ['--expose-gc', '--liftoff-only'],
    globalSetup: ['test/support/global-setup.ts'],
    // Each test file is a process of its own that transforms the same sources: kept on disk once.
    experimental: { fsModuleCache: true },
    testTimeout: 60_000,
    hookTimeout: 60_000,
    projects: [
      // npm test: what needs nothing installed or configured (PGlite; PostgreSQL and Redis when set), the client's tests too.
      {
        extends: true,
        test: {
          name: 'suite',
          include: ['test/**/*.test.ts', 'client/test/**/*.test.ts'],
          exclude: [...configDefaults.exclude, 'test/engines/**', 'test/browser/**'],
          // A worker runs file after file in one process: a fresh process for each file imported the
          // app's modules and compiled PGlite's WASM again, a second or two of CPU a file. Every file
          // builds and closes what it uses (apps, servers, fake timers), so none sees another's state.
          isolate: false,
        },
      },
      // npm run test:engines: the engines production puts in between, started by the tests themselves.
      // One file at a time: each starts several daemons and servers, and two at once starve each other on 2 cores.
      { extends: true, test: { name: 'engines', include: ['test/engines/**/*.test.ts'], fileParallelism: false } },
      // npm run test:browser: pages in headless Chromium (Debian's, .ci/install-browser.sh) calling the built server
      // from other origins. One file at a time: each runs a server and a browser.
      { extends: true, test: { name: 'browser', include: ['test/browser/**/*.test.ts'], fileParallelism: false } },
    ],
  },
});
