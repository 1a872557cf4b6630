import type { AddressInfo } from 'node:net';
import { describe, expect } from 'vitest';
import { generateAdminToken, generateKey } from '../../src/api-keys/format.js';
import { createAdminTokensRepository } from '../../src/admin/tokens-repository.js';
import { adminTest, createKey, expectError, KEYS_COMMAND } from '../support/admin.js';
import { eventually } from '../support/eventually.js';
import { bearer } from '../support/keys.js';
import { closedWithin, openSocket } from '../support/raw-socket.js';

const test = adminTest();

/** Every operation, whether it writes, and a request of it that a write token may make (on key `id`). */
const operations = (id: number) =>
  [
    ['POST', '/admin/v1/keys', { plan: 'free' }, true],
    ['GET', '/admin/v1/keys', undefined, false],
    ['GET', `/admin/v1/keys/${id}`, undefined, false],
    ['PATCH', `/admin/v1/keys/${id}`, { name: 'renamed' }, true],
    ['POST', `/admin/v1/keys/${id}/rotate`, { overlapSeconds: 60 }, true],
    ['POST', `/admin/v1/keys/${id}/revoke`, undefined, true],
    ['GET', `/admin/v1/keys/${id}/usage`, undefined, false],
    ['DELETE', `/admin/v1/keys/${id}/ban`, undefined, true],
    ['GET', '/admin/v1/address-bans', undefined, false],
    ['DELETE', '/admin/v1/address-bans/192.0.2.200', undefined, true],
    ['GET', '/admin/v1/audit', undefined, false],
    ['POST', '/admin/v1/plans', { name: 'scoped', limits: null }, true],
    ['GET', '/admin/v1/plans', undefined, false],
    ['PATCH', '/admin/v1/plans/scoped', { shadow: true }, true],
    ['DELETE', '/admin/v1/plans/scoped', undefined, true],
  ] as const;

describe('admin tokens', () => {
  test('every operation refuses a missing, malformed, made-up, revoked or API-key credential with 401', async ({ t, admin }) => {
    const { id } = await createKey(admin);
    const revoked = await createAdminTokensRepository(t.db).create({ name: 'gone', scope: 'write' }, KEYS_COMMAND);
    await createAdminTokensRepository(t.db).revoke(revoked.id, KEYS_COMMAND);
    const { key: apiKey } = await t.app.apiKeysRepository.create({ plan: 'business' });
    const credentials: Array<[string, Record<string, string>]> = [
      ['none', {}],
      ['another scheme', { authorization: `Basic ${admin.write.token}` }],
      ['malformed', bearer('psa_nope')],
      ['made up, with a valid checksum', bearer(generateAdminToken())],
      ['revoked', bearer(revoked.token)],
      ['an API key', bearer(apiKey)],
      ['a made-up API key', bearer(generateKey())],
    ];
    for (const [method, path, json] of operations(id)) {
      for (const [label, headers] of credentials) {
        const response = await admin.request(method, path, { json, headers: { authorization: '', ...headers } });
        expectError(response, 401, 'unauthorized');
        expect(response.headers.get('www-authenticate'), `${method} ${path} ${label}`).toMatch(/^Bearer realm="pets-admin"/);
      }
    }
    expect((await t.app.apiKeysRepository.get(id))!.state).toBe('active');
  });

  test('a read token may call every read; each change is a 403 that changes nothing', async ({ t, admin }) => {
    const { id } = await createKey(admin, { plan: 'free', name: 'read scope' });
    const read = bearer(admin.read.token);
    for (const [method, path, json, writes] of operations(id)) {
      const response = await admin.request(method, path, { json, headers: read });
      if (writes) {
        expectError(response, 403, 'forbidden');
        expect(response.headers.get('www-authenticate')).toContain('insufficient_scope');
      } else expect(response.status, `${method} ${path}`).toBe(200);
    }
    expect(await t.app.apiKeysRepository.get(id)).toMatchObject({ name: 'read scope', state: 'active', replacedBy: null });
  });

  test('a write token may call every operation', async ({ admin }) => {
    const { id } = await createKey(admin);
    const statuses = [];
    for (const [method, path, json] of operations(id)) statuses.push((await admin.request(method, path, { json })).status);
    expect(statuses).toEqual([201, 200, 200, 200, 201, 200, 200, 204, 200, 204, 200, 201, 200, 200, 204]);
  });

  test('a revoked token is refused at once', async ({ t, admin }) => {
    const tokens = createAdminTokensRepository(t.db);
    const { id, token } = await tokens.create({ name: 'short-lived', scope: 'read' }, KEYS_COMMAND);
    expect((await admin.request('GET', '/admin/v1/keys', { headers: bearer(token) })).status).toBe(200);
    await tokens.revoke(id, KEYS_COMMAND);
    expectError(await admin.request('GET', '/admin/v1/keys', { headers: bearer(token) }), 401, 'unauthorized');
  });
});

describe('the admin listener as an HTTP server', () => {
  test('closes the connection of a client without a token that trickles its body, as the API does', async ({ admin }) => {
    const { port } = admin.server.server.address() as AddressInfo;
    const client = await openSocket(port);
    client.socket.write('POST /admin/v1/keys HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"pl');
    await eventually(async () => client.received.includes('\r\n\r\n'));
    expect(client.received).toMatch(/^HTTP\/1\.1 401 /);
    expect(client.received.toLowerCase()).toContain('connection: close');
    expect(await closedWithin(client, 2_000)).toBe(true);
  });
});
