import { randomUUID } from 'node:crypto';
import { Writable } from 'node:stream';
import pg from 'pg';
import type { FastifyInstance } from 'fastify';
import { buildApp, type AppDependencies } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import type { Database } from '../src/db/database.js';
import { createPgliteDatabase } from '../src/db/pglite.js';
import { createPostgresDatabase } from '../src/db/postgres.js';

/** The PostgreSQL server the suite runs against, or undefined for PGlite. */
export const POSTGRES_URL = process.env.DATABASE_URL || undefined;

/**
 * A database of its own for one test file: a fresh database on the PostgreSQL server in
 * DATABASE_URL, or an in-memory PGlite. `drop()` removes it again.
 */
export async function createTestDatabase(): Promise<{ db: Database; url?: string; drop: () => Promise<void> }> {
  if (!POSTGRES_URL) {
    const db = await createPgliteDatabase('memory://');
    return { db, drop: () => db.close().catch(() => {}) };
  }
  const name = `pets_test_${randomUUID().replaceAll('-', '').slice(0, 16)}`;
  await adminQuery(`CREATE DATABASE ${name}`);
  const url = new URL(POSTGRES_URL);
  url.pathname = `/${name}`;
  const db = createPostgresDatabase({ connectionString: url.href });
  return {
    db,
    url: url.href,
    drop: async () => {
      await db.close().catch(() => {});
      await adminQuery(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    },
  };
}

async function adminQuery(sql: string) {
  const client = new pg.Client({ connectionString: POSTGRES_URL });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

/** Captures log lines so tests can read what the service logged. */
export function captureLogs() {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk, _encoding, done) {
      lines.push(...String(chunk).split('\n').filter(Boolean));
      done();
    },
  });
  return { stream, lines, entries: () => lines.map((line) => JSON.parse(line) as Record<string, unknown>) };
}

export interface TestApp {
  app: FastifyInstance;
  db: Database;
  logs: ReturnType<typeof captureLogs>;
  close: () => Promise<void>;
}

/** The production app, built by the same buildApp, over a database of the test file's own. */
export async function buildTestApp(env: Record<string, string> = {}, deps: AppDependencies = {}): Promise<TestApp> {
  const { db, drop } = await createTestDatabase();
  const logs = captureLogs();
  const config = loadConfig({ PUBLIC_BASE_URL: 'https://api.example.test/v1', LOG_LEVEL: 'info', ...env });
  const app = await buildApp(config, { db, logStream: logs.stream, ...deps });
  await app.ready();
  return {
    app,
    db,
    logs,
    close: async () => {
      await app.close();
      await drop();
    },
  };
}

export interface HttpResponse {
  status: number;
  headers: Headers;
  // Tests read whatever JSON came back.
  body: any; // eslint-disable-line @typescript-eslint/no-explicit-any
}

/** Listens on a free loopback port and returns a client that speaks real HTTP to it. */
export async function listen(app: FastifyInstance) {
  await app.listen({ port: 0, host: '127.0.0.1' });
  const address = app.server.address();
  const origin = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
  return async function request(
    method: string,
    path: string,
    { json, body, headers = {} }: { json?: unknown; body?: string; headers?: Record<string, string> } = {},
  ): Promise<HttpResponse> {
    const init: RequestInit = { method, headers: { ...headers } };
    if (json !== undefined) {
      init.body = JSON.stringify(json);
      init.headers = { 'content-type': 'application/json', ...headers };
    } else if (body !== undefined) {
      init.body = body;
    }
    const response = await fetch(origin + path, init);
    const text = await response.text();
    return { status: response.status, headers: response.headers, body: text ? JSON.parse(text) : undefined };
  };
}
