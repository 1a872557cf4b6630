import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Each file gets its own database, so files run in parallel; PGlite and real processes need time to start.
    pool: 'forks',
    // Memory tests collect garbage before they measure, so they compare what is really held.
    execArgv: ['--expose-gc'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
