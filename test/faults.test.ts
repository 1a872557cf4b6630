/**
 * A fault with real processes on the embedded database: the server (src/server.ts) stopped with
 * SIGTERM while clients create pets. The faults of a private PostgreSQL server and a private Redis
 * are in test/engines/faults.test.ts, whose private-server SIGTERM test covers the PostgreSQL run.
 */
import { describe, expect } from 'vitest';
import { openExistingDatabase } from '../harness/databases.js';
import { POSTGRES_URL } from './support/databases.js';
import { eventually } from './support/eventually.js';
import { expectCleanStop, keyAccepted, seconds, send, startLoad, tally } from './support/fault-load.js';
import { tempDirTest } from './support/fixtures.js';
import { developmentKey } from './support/keys.js';
import { startServer } from '../harness/processes.js';

// The embedded database's data directory.
const dataDirTest = tempDirTest('pets-faults-');

describe.skipIf(POSTGRES_URL)('SIGTERM on the embedded database', () => {
  dataDirTest(
    'while 50 clients create pets: every 201 is on disk afterwards and nothing else, exit 0 within the grace period',
    async ({ dir: dataDir }) => {
      const server = await startServer({ env: { DATA_DIR: dataDir } });
      try {
        // The development key (business plan, 1,000 a minute): this test sends a few hundred requests.
        const authorization = `Bearer ${await developmentKey(server)}`;
        await keyAccepted(server, authorization);
        const load = startLoad(50, (client, seq) => send(server.origin, authorization, 'create', `embedded-${client}-${seq}`), {
          stopWhen: (outcome) => outcome.status !== 201,
        });
        // A bound for a failure only: a loaded machine takes its time over 200 creates on PGlite.
        await eventually(async () => load.outcomes.length >= 200, 60_000);
        const signalled = Date.now();
        const code = await server.stop('SIGTERM');
        const exitMs = Date.now() - signalled;
        await load.done;
        const outcomes = load.outcomes;

        const created = outcomes.filter((outcome) => outcome.status === 201);
        const failed = outcomes.filter((outcome) => outcome.status !== 201);
        const db = await openExistingDatabase({ dataDir });
        const rows = await db.query<{ id: number; name: string }>('SELECT id::int AS id, name FROM pets ORDER BY id');
        await db.close();
        console.log(
          `SIGTERM with 50 clients (embedded): ${outcomes.length} requests, ${created.length} x 201, ${failed.length} failures (${tally(failed)}` +
            `${failed.some((f) => f.error) ? `: ${[...new Set(failed.map((f) => f.error).filter(Boolean))].join(', ')}` : ''}); ` +
            `${rows.length} rows on disk; exit ${code} after ${seconds(exitMs)}`,
        );

        expect(code).toBe(0);
        expect(exitMs).toBeLessThan(10_000);
        expect(failed).toHaveLength(50);
        expectCleanStop(failed, created, rows);
      } finally {
        await server.stop('SIGKILL');
      }
    },
  );
});
