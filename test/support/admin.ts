import type { FastifyInstance } from 'fastify';
import { expect } from 'vitest';
import { buildAdminServer } from '../../src/admin/server.js';
import type { Actor } from '../../src/audit/repository.js';
import { createAdminTokensRepository, type AdminScope } from '../../src/admin/tokens-repository.js';
import type { TestApp } from './app.js';
import { appTest, type AppTestOptions } from './fixtures.js';
import { listen, type HttpResponse } from './http.js';
import { bearer } from './keys.js';

/** The keys command's actor: tokens made for tests are made as the command makes them. */
export const KEYS_COMMAND: Actor = { name: 'cli:keys', adminTokenId: null };

/** An admin token of the app's database, as `keys admin-token create` makes one. */
export const createAdminToken = (app: FastifyInstance, scope: AdminScope, name = `${scope} token`) =>
  createAdminTokensRepository(app.db).create({ name, scope }, KEYS_COMMAND);

/**
 * The admin listener of an app (buildAdminServer, as server.ts builds it) on a loopback port, with
 * a read and a write token; `request` sends the write token unless a test gives other headers.
 * Closed before the app: it uses the app's database.
 */
export async function openAdmin(app: FastifyInstance) {
  const server = await buildAdminServer(app);
  const [read, write] = await Promise.all([createAdminToken(app, 'read'), createAdminToken(app, 'write')]);
  return {
    server,
    read,
    write,
    request: await listen(server, bearer(write.token)),
    close: () => server.close(),
  };
}

export type TestAdmin = Awaited<ReturnType<typeof openAdmin>>;

/** The `admin` fixture of a test API with `t` (see appTest, describeAppTest): the admin listener of its app, closed before it. */
export async function adminFixture({ t }: { t: TestApp }, { onCleanup }: { onCleanup: (cleanup: () => Promise<void>) => void }) {
  const admin = await openAdmin(t.app);
  onCleanup(admin.close);
  return admin;
}

/** appTest's API whose tests also get `admin`, the admin listener of the file's app. */
export const adminTest = (options?: AppTestOptions) => appTest(options).extend('admin', { scope: 'file' }, adminFixture);

/** An error of the admin API: its status and the {code, message, status} body of every non-2xx. */
export function expectError(response: HttpResponse, status: number, code: string) {
  expect(response.status, JSON.stringify(response.body)).toBe(status);
  expect(response.body).toEqual({ code, message: expect.any(String), status });
}

/** Creates a key through the API with the write token. */
export async function createKey(admin: TestAdmin, body: Record<string, unknown> = { plan: 'free' }) {
  const response = await admin.request('POST', '/admin/v1/keys', { json: body });
  expect(response.status, JSON.stringify(response.body)).toBe(201);
  return response.body as { id: number; key: string; [field: string]: unknown };
}
