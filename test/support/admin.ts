import type { FastifyInstance } from 'fastify';
import { buildAdminServer } from '../../src/admin/server.js';
import type { Actor } from '../../src/audit/repository.js';
import { createAdminTokensRepository, type AdminScope } from '../../src/admin/tokens-repository.js';
import { listen } from './http.js';
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
