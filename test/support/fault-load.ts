import { randomUUID } from 'node:crypto';
import { expect } from 'vitest';
import { eventually } from './eventually.js';
import { waitForKeyAt } from './keys.js';
import type { ServerProcess } from '../../harness/processes.js';
import { sleep } from './time.js';

/**
 * Clients that keep sending to a server process while a fault happens, every response recorded:
 * what the fault tests (test/faults.test.ts, test/engines/faults.test.ts) share.
 */

/** A request still unanswered after this is recorded as a hang (the server's request timeout is 30 s). */
export const CLIENT_TIMEOUT_MS = 29_000;

export interface Outcome {
  op: 'create' | 'list';
  name?: string;
  /** The HTTP status, or how the request failed without one. */
  status: number | 'error' | 'timeout';
  error?: string;
  body?: unknown;
  retryAfter: string | null;
  /** The Connection header: `close` when the server ends the connection after this response. */
  connection?: string | null;
  started: number;
  ended: number;
  ms: number;
}

export async function send(origin: string, authorization: string, op: Outcome['op'], name?: string): Promise<Outcome> {
  const started = Date.now();
  const create = op === 'create';
  try {
    const response = await fetch(create ? `${origin}/v1/pets` : `${origin}/v1/pets?limit=5`, {
      method: create ? 'POST' : 'GET',
      headers: create ? { authorization, 'content-type': 'application/json' } : { authorization },
      body: create ? JSON.stringify({ name, categoryId: 1, status: 'available' }) : undefined,
      signal: AbortSignal.timeout(CLIENT_TIMEOUT_MS),
    });
    const text = await response.text();
    let body: unknown = text;
    try {
      body = JSON.parse(text);
    } catch {
      // kept as text
    }
    const ended = Date.now();
    const { headers } = response;
    return {
      op,
      name,
      status: response.status,
      body,
      retryAfter: headers.get('retry-after'),
      connection: headers.get('connection'),
      started,
      ended,
      ms: ended - started,
    };
  } catch (error) {
    const ended = Date.now();
    const { name: errorName, message, cause } = error as Error & { cause?: { code?: string; message?: string } };
    return {
      op,
      name,
      status: errorName === 'TimeoutError' ? 'timeout' : 'error',
      error: cause?.code ?? cause?.message ?? message,
      retryAfter: null,
      started,
      ended,
      ms: ended - started,
    };
  }
}

/** `clients` loops sending one request after another until stopped, or until stopWhen says so. */
export function startLoad(
  clients: number,
  request: (client: number, seq: number) => Promise<Outcome>,
  { pauseMs = 0, stopWhen }: { pauseMs?: number; stopWhen?: (outcome: Outcome) => boolean } = {},
) {
  const outcomes: Outcome[] = [];
  let running = true;
  const done = Promise.all(
    Array.from({ length: clients }, async (_, client) => {
      for (let seq = 0; running; seq++) {
        const outcome = await request(client, seq);
        outcomes.push(outcome);
        if (stopWhen?.(outcome)) return;
        if (pauseMs) await sleep(pauseMs);
      }
    }),
  );
  return {
    outcomes,
    done,
    stop: async () => {
      running = false;
      await done;
      return outcomes;
    },
  };
}

/** Resolves once `count` requests sent at `since` or later have been answered: traffic in a window a test looks at. */
export const answeredSince = (load: { outcomes: Outcome[] }, since: number, count: number) =>
  eventually(async () => load.outcomes.filter((outcome) => outcome.started >= since).length >= count, 20_000);

/** Create on even sequence numbers, list on odd ones. */
export const mixed = (origin: string, authorization: string) => (client: number, seq: number) =>
  seq % 2 === 0 ? send(origin, authorization, 'create', `c${client}-${seq}-${randomUUID()}`) : send(origin, authorization, 'list');

/** "230 x 200, 182 x 503, 3 x error" */
export function tally(outcomes: Outcome[]): string {
  const counts = new Map<string, number>();
  for (const { status } of outcomes) counts.set(String(status), (counts.get(String(status)) ?? 0) + 1);
  return [...counts]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([status, count]) => `${count} x ${status}`)
    .join(', ');
}

export const maxLatency = (outcomes: Outcome[]) => Math.max(0, ...outcomes.map((outcome) => outcome.ms));
export const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

/** 503s that are not the service's Error body with a Retry-After: the contract for an outage. */
export const malformed503s = (outcomes: Outcome[]) =>
  outcomes.filter((outcome) => {
    if (outcome.status !== 503) return false;
    const body = outcome.body as { code?: unknown; message?: unknown; status?: unknown };
    const wellFormed =
      body?.code === 'service_unavailable' &&
      typeof body.message === 'string' &&
      body.message.length > 0 &&
      body.status === 503 &&
      Object.keys(body).length === 3 &&
      /^[1-9][0-9]*$/.test(outcome.retryAfter ?? '');
    return !wellFormed;
  });

/**
 * What a stop under load must leave: every client that failed stopped on a refused connection or
 * the service's 503, and the table holds exactly the 201s, each under the id its response gave.
 */
export function expectCleanStop(failed: Outcome[], created: Outcome[], rows: Array<{ id: number; name: string }>) {
  expect(failed.filter((outcome) => outcome.status !== 'error' && outcome.status !== 503)).toEqual([]);
  expect(malformed503s(failed)).toEqual([]);
  expect(new Map(rows.map((row) => [row.name, row.id]))).toEqual(
    new Map(created.map((outcome) => [outcome.name!, (outcome.body as { id: number }).id])),
  );
  expect(rows).toHaveLength(created.length);
}

/** Waits until the running server accepts the key. */
export const keyAccepted = (server: ServerProcess, authorization: string) => waitForKeyAt(server.origin, { authorization });
