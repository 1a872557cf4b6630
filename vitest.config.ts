import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Each file gets its own database, so files run in parallel; PGlite and real processes need time to start.
    pool: 'forks',
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
