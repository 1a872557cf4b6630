import { randomUUID } from 'node:crypto';
import { Writable } from 'node:stream';
import pg from 'pg';
import type { FastifyInstance } from 'fastify';
import { buildApp, type AppDependencies } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import type { Database } from '../src/db/database.js';
import { createPgliteDatabase } from '../src/db/pglite.js';
import { createPostgresDatabase } from '../src/db/postgres.js';
import { freePort } from './support/free-port.js';

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
  const { url, drop } = await createPostgresTestDatabase(POSTGRES_URL);
  const db = createPostgresDatabase({ connectionString: url });
  return {
    db,
    url,
    drop: async () => {
      await db.close().catch(() => {});
      await drop();
    },
  };
}

/** An empty database on the PostgreSQL server of `serverUrl`, and how to drop it. */
async function createPostgresTestDatabase(serverUrl: string) {
  const name = `pets_test_${randomUUID().replaceAll('-', '').slice(0, 16)}`;
  await adminQuery(`CREATE DATABASE ${name}`);
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return { url: url.href, drop: () => adminQuery(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`) };
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
  /** Headers of an enterprise key whose limits no test reaches. */
  auth: { authorization: string };
  logs: ReturnType<typeof captureLogs>;
  close: () => Promise<void>;
}

/**
 * The production app, built by the same buildApp from the same configuration, which opens a
 * database of the test's own: a fresh one on the PostgreSQL server, or an in-memory PGlite.
 */
export async function buildTestApp(env: Record<string, string> = {}, deps: AppDependencies = {}): Promise<TestApp> {
  const database = POSTGRES_URL ? await createPostgresTestDatabase(POSTGRES_URL) : { url: '', drop: async () => {} };
  const logs = captureLogs();
  const config = loadConfig({
    DATABASE_URL: database.url,
    DATA_DIR: 'memory://',
    PUBLIC_BASE_URL: 'https://api.example.test/v1',
    LOG_LEVEL: 'info',
    ...env,
  });
  const app = await buildApp(config, { logStream: logs.stream, ...deps });
  await app.ready();
  const { db } = app;
  const drop = database.drop;
  const { key } = await app.apiKeysRepository.create({ plan: 'enterprise', name: 'tests', limits: { perMinute: 1e9, perDay: 2e9 } });
  await eventually(async () => (await app.inject({ url: '/v1/pets?limit=1', headers: { authorization: `Bearer ${key}` } })).statusCode === 200);
  return {
    app,
    db,
    auth: { authorization: `Bearer ${key}` },
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

/** Polls a condition until it holds, for changes that reach the app asynchronously (NOTIFY). */
export async function eventually(condition: () => Promise<boolean>, timeoutMs = 5_000): Promise<number> {
  const started = Date.now();
  while (!(await condition())) {
    if (Date.now() - started > timeoutMs) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return Date.now() - started;
}

/** Listens on a free loopback port and returns a client that speaks real HTTP to it, sending defaultHeaders. */
export async function listen(app: FastifyInstance, defaultHeaders: Record<string, string> = {}) {
  await app.listen({ port: 0, host: '127.0.0.1' });
  const address = app.server.address();
  const origin = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
  return async function request(
    method: string,
    path: string,
    { json, body, headers = {} }: { json?: unknown; body?: string; headers?: Record<string, string> } = {},
  ): Promise<HttpResponse> {
    const init: RequestInit = { method, headers: { ...defaultHeaders, ...headers } };
    if (json !== undefined) {
      init.body = JSON.stringify(json);
      init.headers = { 'content-type': 'application/json', ...defaultHeaders, ...headers };
    } else if (body !== undefined) {
      init.body = body;
    }
    const response = await fetch(origin + path, init);
    const text = await response.text();
    return { status: response.status, headers: response.headers, body: text ? JSON.parse(text) : undefined };
  };
}

export interface ServerProcess {
  origin: string;
  output: () => string;
  stop: (signal?: NodeJS.Signals) => Promise<number | null>;
}

/** Starts src/server.ts as a real process, the way `npm start` runs it, and waits until it listens. */
export async function startServer(env: Record<string, string>): Promise<ServerProcess> {
  const { spawn } = await import('node:child_process');
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/server.ts'], {
    env: {
      ...process.env,
      DATABASE_URL: '',
      PORT: String(await freePort()),
      METRICS_PORT: '0',
      LOG_LEVEL: 'info',
      // Key ids repeat across test databases; their rate-limit counts in a shared Redis must not.
      REDIS_KEY_PREFIX: `test:${randomUUID()}:`,
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const origin = await new Promise<string>((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      const match = output.match(/Server listening at (http:\/\/127\.0\.0\.1:\d+)/);
      if (match) resolve(match[1]!);
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    void exited.then((code) => reject(new Error(`server exited with ${code} before listening:\n${output}`)));
  });
  return {
    origin,
    output: () => output,
    stop: (signal = 'SIGTERM') => {
      child.kill(signal);
      return exited;
    },
  };
}

/** Runs a command to completion and returns its exit code and what it printed. */
export async function runCommand(command: string, args: string[], env: Record<string, string> = {}) {
  const { spawn } = await import('node:child_process');
  const child = spawn(command, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk) => (stdout += chunk));
  child.stderr.on('data', (chunk) => (stderr += chunk));
  const code = await new Promise<number | null>((resolve) => child.once('close', resolve));
  return { code, stdout, stderr };
}

/** Runs a TypeScript entry point of this project, as tsx runs it. */
export const run = (args: string[], env: Record<string, string> = {}) =>
  runCommand(process.execPath, ['--import', 'tsx', ...args], env);

/** The development key a server prints on its first embedded start. */
export async function developmentKey(server: ServerProcess): Promise<string> {
  let key: string | undefined;
  await eventually(async () => Boolean((key = server.output().match(/^ {2}(psk_\S+)$/m)?.[1])));
  return key!;
}

/** Heap in use after a full garbage collection (the suite runs with --expose-gc). */
export function heapAfterGc(): number {
  globalThis.gc!();
  return process.memoryUsage().heapUsed;
}

/** The Redis the suite may use; tests that need it are skipped without it. */
export const REDIS_URL = process.env.REDIS_URL || undefined;

/** A Redis server of a test's own on a free port, which it may stop and start again. */
export async function startRedis() {
  const { spawn } = await import('node:child_process');
  const port = await freePort();
  let child: ReturnType<typeof spawn> | undefined;
  const start = async () => {
    child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
      stdio: 'ignore',
    });
    const { Redis } = await import('ioredis');
    await eventually(async () => {
      const probe = new Redis(port, '127.0.0.1', { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
      probe.on('error', () => {});
      try {
        await probe.connect();
        return (await probe.ping()) === 'PONG';
      } catch {
        return false;
      } finally {
        probe.disconnect();
      }
    });
  };
  const stop = async () => {
    const exited = new Promise((resolve) => child!.once('exit', resolve));
    child!.kill('SIGKILL');
    await exited;
  };
  await start();
  return { url: `redis://127.0.0.1:${port}`, start, stop };
}
