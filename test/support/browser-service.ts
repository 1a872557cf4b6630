import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test as base } from 'vitest';
import { createScratchDatabase } from '../../harness/databases.js';
import { freePort } from '../../harness/free-port.js';
import { run, startServer } from '../../harness/processes.js';
import { launchChromium, openPage, servePages } from './browser.js';
import { POSTGRES_URL } from './databases.js';
import { eventually } from './eventually.js';
import { bearer, waitForKey } from './keys.js';

/** A line of the server's request log (src/platform/http/request-log.ts): `request`, or `preflight` (at debug level). */
export interface RequestLine {
  msg: 'request' | 'preflight';
  reqId: string;
  origin?: string;
  method: string;
  route?: string;
  status?: number;
}

function requestLines(output: string) {
  return output
    .split('\n')
    .filter((line) => line.startsWith('{') && /"msg":"(request|preflight)"/.test(line))
    .map((line) => JSON.parse(line) as RequestLine);
}

const matches = (line: RequestLine, like: Partial<RequestLine>) =>
  Object.entries(like).every(([field, value]) => line[field as keyof RequestLine] === value);

/** The database a server of the browser tests uses: a fresh one on the PostgreSQL server when DATABASE_URL is set, else an embedded one. */
async function databaseOfItsOwn(): Promise<{ env: Record<string, string>; drop: () => Promise<void> }> {
  if (POSTGRES_URL) {
    const { url, drop } = await createScratchDatabase(POSTGRES_URL);
    return { env: { DATABASE_URL: url }, drop };
  }
  const dataDir = await mkdtemp(join(tmpdir(), 'pets-browser-'));
  return { env: { DATABASE_URL: '', DATA_DIR: dataDir }, drop: () => rm(dataDir, { recursive: true, force: true }) };
}

/**
 * The service as a user runs it (the built server, started as a process; Redis when REDIS_URL is
 * set), allowing `corsOrigins`, with its admin listener and a write token made by the keys command
 * beforehand, as an operator makes one: `createKey` makes keys through the admin API over HTTP.
 */
export async function startBrowserService(corsOrigins: string[]) {
  const database = await databaseOfItsOwn();
  const made = await run(['dist/cli/keys.js', 'admin-token', 'create', '--scope', 'write', '--name', 'browser tests'], database.env);
  if (made.code !== 0) throw new Error(`keys admin-token create failed: ${made.stderr}`);
  const adminToken = made.stdout.trimEnd().split('\n').at(-1)!;
  const adminPort = await freePort();
  const server = await startServer({
    name: 'browser-api',
    // Debug: preflights are logged at that level only, and the tests count them.
    env: { ...database.env, ADMIN_PORT: String(adminPort), CORS_ORIGINS: corsOrigins.join(','), LOG_LEVEL: 'debug' },
  });
  const admin = `http://127.0.0.1:${adminPort}/admin/v1`;
  return {
    server,
    /** The base URL of /v1, as callers write it. */
    api: `${server.origin}/v1`,
    /** A key made through the admin API (POST /admin/v1/keys with `settings`), once the service takes it. */
    async createKey(settings: Record<string, unknown>) {
      const response = await fetch(`${admin}/keys`, {
        method: 'POST',
        headers: { ...bearer(adminToken), 'content-type': 'application/json' },
        body: JSON.stringify(settings),
      });
      const body = (await response.json()) as { key?: string };
      if (response.status !== 201) throw new Error(`POST /admin/v1/keys answered ${response.status}: ${JSON.stringify(body)}`);
      // GET /v1/rate_limit spends nothing of the key's windows: a key of tiny limits keeps them all.
      await waitForKey(async () => (await fetch(`${server.origin}/v1/rate_limit`, { headers: bearer(body.key!) })).status);
      return body.key!;
    },
    /**
     * How many requests like `like` the server has logged, preflights included. Its log is written
     * a moment after each answer, in order: a request of this module's own, once its line is there,
     * says every request answered before it is logged too.
     */
    async logged(like: Partial<RequestLine>) {
      const marker = (await fetch(`${server.origin}/healthz`)).headers.get('x-request-id');
      await eventually(async () => requestLines(server.output()).some((line) => line.reqId === marker));
      return requestLines(server.output()).filter((line) => matches(line, like)).length;
    },
    async stop() {
      await server.stop();
      await database.drop();
    },
  };
}

export type BrowserService = Awaited<ReturnType<typeof startBrowserService>>;

/**
 * A test API whose tests get, for the whole file: `origins`, two page origins (the shop's and
 * another's); `service`, the server allowing those of them `allowed` picks (CORS_ORIGINS);
 * `pages`, the test page loaded from each origin in one headless Chromium.
 */
export function browserTest(allowed: (origins: [string, string]) => string[]) {
  return (
    base
      // eslint-disable-next-line no-empty-pattern -- vitest reads a fixture's dependencies from this pattern
      .extend('origins', { scope: 'file' }, async ({}, { onCleanup }) => {
        const served = await servePages(2);
        onCleanup(async () => void (await served.close()));
        return served.origins as [string, string];
      })
      .extend('service', { scope: 'file' }, async ({ origins }, { onCleanup }) => {
        const service = await startBrowserService(allowed(origins));
        onCleanup(() => service.stop());
        return service;
      })
      // eslint-disable-next-line no-empty-pattern -- vitest reads a fixture's dependencies from this pattern
      .extend('browser', { scope: 'file' }, async ({}, { onCleanup }) => {
        const browser = await launchChromium();
        onCleanup(browser.close);
        return browser.context;
      })
      .extend('pages', { scope: 'file' }, async ({ origins, browser }) => Promise.all(origins.map((origin) => openPage(browser, origin))))
  );
}
