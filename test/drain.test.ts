/**
 * The drain on SIGTERM, with the real server process (src/server.ts): readiness turns 503 first,
 * everything else is still served for SHUTDOWN_DRAIN_MS, then the server closes and exits 0. A
 * balancer that follows /readyz (or, like nginx in docker-compose.yml, re-resolves its replicas)
 * has that long to stop sending here before the port closes.
 */
import { randomUUID } from 'node:crypto';
import { test as base, describe, expect } from 'vitest';
import { createApiKeysRepository } from '../src/api-keys/repository.js';
import { cleanupStack } from './support/fixtures.js';
import { createScratchDatabase, openExistingDatabase } from '../harness/databases.js';
import { POSTGRES_URL } from './support/databases.js';
import { startServer, type ServerProcess } from '../harness/processes.js';
import { eventually } from './support/eventually.js';
import { developmentKey, waitForKeyAt } from './support/keys.js';
import { sleep } from './support/time.js';
import { minuteAndDay } from '../src/plans/limits.js';

const DRAIN_MS = 3_000;
/** Four clients, one request each per this many ms at most: about 100 a second. */
const PGLITE_PACE_MS = 40;
/** close-with-grace's delay in src/server.ts: the drain, then 10 s for in-flight requests. */
const EXIT_BOUND_MS = DRAIN_MS + 10_000;

interface Outcome {
  what: 'list' | 'create' | 'readyz';
  status: number | 'error';
  error?: string;
  connection: string | null;
  started: number;
  ended: number;
}

async function send(origin: string, what: Outcome['what'], authorization: string): Promise<Outcome> {
  const started = Date.now();
  const create = what === 'create';
  try {
    const response = await fetch(`${origin}${what === 'readyz' ? '/readyz' : create ? '/v1/pets' : '/v1/pets?limit=5'}`, {
      method: create ? 'POST' : 'GET',
      headers: create
        ? { authorization, 'content-type': 'application/json', 'idempotency-key': `"drain-${randomUUID()}"` }
        : { authorization },
      body: create ? JSON.stringify({ name: 'Drained', categoryId: 1 }) : undefined,
      signal: AbortSignal.timeout(20_000),
    });
    await response.arrayBuffer();
    return { what, status: response.status, connection: response.headers.get('connection'), started, ended: Date.now() };
  } catch (error) {
    const { message, cause } = error as Error & { cause?: { code?: string; message?: string } };
    return { what, status: 'error', error: cause?.code ?? cause?.message ?? message, connection: null, started, ended: Date.now() };
  }
}

function tally(outcomes: Outcome[]): string {
  const counts = new Map<string, number>();
  for (const { what, status } of outcomes) counts.set(`${what} ${status}`, (counts.get(`${what} ${status}`) ?? 0) + 1);
  return [...counts].map(([key, count]) => `${count} x ${key}`).join(', ');
}

const test = base.extend(
  'target',
  { scope: 'file' },
  // eslint-disable-next-line no-empty-pattern -- vitest reads a fixture's dependencies from this pattern
  async ({}, { onCleanup }) => {
    return cleanupStack(onCleanup, async (defer) => {
      const env: Record<string, string> = { SHUTDOWN_DRAIN_MS: String(DRAIN_MS) };
      let server: ServerProcess;
      let authorization: string;
      if (POSTGRES_URL) {
        const scratch = await createScratchDatabase(POSTGRES_URL);
        defer(() => scratch.drop());
        server = await startServer({ name: 'drain', env: { ...env, DATABASE_URL: scratch.url }, readyPath: '/readyz' });
        defer(() => server.stop('SIGKILL'));
        const db = await openExistingDatabase({ url: scratch.url });
        try {
          const { key } = await createApiKeysRepository(db).create({
            plan: 'enterprise',
            name: 'drain',
            limits: minuteAndDay(1e9, 2e9),
          });
          authorization = `Bearer ${key}`;
        } finally {
          await db.close();
        }
      } else {
        server = await startServer({ name: 'drain', env: { ...env, DATA_DIR: 'memory://' }, readyPath: '/readyz' });
        defer(() => server.stop('SIGKILL'));
        authorization = `Bearer ${await developmentKey(server)}`;
      }
      await waitForKeyAt(server.origin, { authorization });
      return { server, authorization };
    });
  },
);

describe('SIGTERM drains before it closes', () => {
  test('/readyz answers 503 at once, other requests are served on their keep-alive connections through the drain, then exit 0', async ({
    target: { server, authorization },
  }) => {
    const outcomes: Outcome[] = [];
    let running = true;
    // Four clients alternate lists and creates (each create with its own Idempotency-Key) over
    // fetch's keep-alive connections; a fifth asks /readyz every 50 ms. All stop once the process is gone.
    const clients = Array.from({ length: 4 }, async (_, client) => {
      for (let seq = 0; running; seq++) {
        outcomes.push(await send(server.origin, (client + seq) % 2 ? 'create' : 'list', authorization));
        // The embedded database's development key is on the business plan (1,000 a minute): paced
        // under it, no 429 stands in for a request the drain should have served.
        if (!POSTGRES_URL) await sleep(PGLITE_PACE_MS);
      }
    });
    const readiness = (async () => {
      while (running) {
        outcomes.push(await send(server.origin, 'readyz', authorization));
        await sleep(50);
      }
    })();
    await eventually(async () => outcomes.filter((outcome) => outcome.status === 200 || outcome.status === 201).length >= 100, 20_000);

    const signalled = Date.now();
    const code = await server.stop('SIGTERM');
    const exitedAt = Date.now();
    running = false;
    await Promise.all([...clients, readiness]);
    const exitMs = exitedAt - signalled;

    const after = outcomes.filter((outcome) => outcome.started >= signalled);
    const requests = after.filter((outcome) => outcome.what !== 'readyz');
    const probes = after.filter((outcome) => outcome.what === 'readyz');
    // Within the drain, with a margin either side for the signal's delivery and the close itself.
    const duringDrain = (outcome: Outcome) => outcome.started >= signalled + 300 && outcome.ended <= signalled + DRAIN_MS - 300;
    const firstNotReady = probes.find((outcome) => outcome.status !== 200);
    console.log(
      `drain: exit ${code} after ${exitMs} ms; /readyz first not ready ${firstNotReady ? firstNotReady.started - signalled : '-'} ms after the signal; ` +
        `after the signal: ${tally(after)}`,
    );

    // Readiness first: 503 within moments of the signal, and never ready again.
    expect(firstNotReady?.status).toBe(503);
    expect(firstNotReady!.started - signalled).toBeLessThan(300);
    expect(probes.filter((outcome) => outcome.started >= firstNotReady!.started && outcome.status === 200)).toEqual([]);
    // Then the process exits 0, after the drain and within close-with-grace's delay.
    expect(code).toBe(0);
    expect(exitMs).toBeGreaterThanOrEqual(DRAIN_MS);
    expect(exitMs).toBeLessThan(EXIT_BOUND_MS);
    // Everything else still served through the drain, no connection error, each response telling
    // the client to take its next request elsewhere.
    const drained = requests.filter(duringDrain);
    expect(drained.length).toBeGreaterThanOrEqual(20);
    expect(drained.filter((outcome) => outcome.status !== 200 && outcome.status !== 201)).toEqual([]);
    expect(drained.filter((outcome) => outcome.connection !== 'close')).toEqual([]);
    // After the drain only refused connections or the service's 503: nothing failed half-way.
    expect(requests.filter((outcome) => ![200, 201, 503, 'error'].includes(outcome.status))).toEqual([]);
  });
});
