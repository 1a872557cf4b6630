import { describe, expect } from 'vitest';
import { developmentKeyGreeting } from '../../src/api-keys/development-key.js';
import { buildApp } from '../../src/app.js';
import { loadConfig } from '../../src/config/load.js';
import { adminTest, openAdmin } from '../support/admin.js';
import { bearer } from '../support/keys.js';
import { captureLogs } from '../support/logs.js';

const test = adminTest();

describe('the audit trail', () => {
  test('records every change with the admin token and request id, newest first, never a secret', async ({ t, admin }) => {
    const created = await admin.request('POST', '/admin/v1/keys', { json: { plan: 'free', name: 'audited' } });
    const { id } = created.body;
    const changed = await admin.request('PATCH', `/admin/v1/keys/${id}`, { json: { plan: 'pro' } });
    const rotated = await admin.request('POST', `/admin/v1/keys/${id}/rotate`, { json: { overlapSeconds: 60 } });
    await admin.request('POST', `/admin/v1/keys/${rotated.body.id}/revoke`);
    // Neither reads nor a refused change are changes.
    await admin.request('GET', `/admin/v1/keys/${id}`);
    await admin.request('PATCH', `/admin/v1/keys/${id}`, { json: { plan: 'pro' }, headers: bearer(admin.read.token) });

    const page = await admin.request('GET', '/admin/v1/audit?limit=4', { headers: bearer(admin.read.token) });
    expect(page.status).toBe(200);
    const writer = admin.write.id;
    expect(page.body).toEqual([
      {
        id: expect.any(Number),
        at: expect.any(String),
        actor: 'admin-api',
        adminTokenId: writer,
        requestId: expect.any(String),
        action: 'key.revoke',
        keyId: rotated.body.id,
        // The key rotated into it, still in its overlap, was revoked with it.
        details: { sameQuota: [id] },
      },
      {
        id: expect.any(Number),
        at: expect.any(String),
        actor: 'admin-api',
        adminTokenId: writer,
        requestId: rotated.headers.get('x-request-id'),
        action: 'key.rotate',
        keyId: id,
        details: { newKeyId: rotated.body.id, overlapSeconds: 60 },
      },
      {
        id: expect.any(Number),
        at: expect.any(String),
        actor: 'admin-api',
        adminTokenId: writer,
        requestId: changed.headers.get('x-request-id'),
        action: 'key.update',
        keyId: id,
        details: {
          before: {
            plan: 'free',
            perMinute: 60,
            perDay: 1_000,
            name: 'audited',
            enforceLimits: true,
            concurrency: null,
            limits: null,
            allowedOrigins: null,
          },
          after: {
            plan: 'pro',
            perMinute: 300,
            perDay: 10_000,
            name: 'audited',
            enforceLimits: true,
            concurrency: null,
            limits: null,
            allowedOrigins: null,
          },
        },
      },
      {
        id: expect.any(Number),
        at: expect.any(String),
        actor: 'admin-api',
        adminTokenId: writer,
        requestId: created.headers.get('x-request-id'),
        action: 'key.create',
        keyId: id,
        details: {
          plan: 'free',
          name: 'audited',
          perMinute: 60,
          perDay: 1_000,
          expiresAt: null,
          readOnly: false,
          enforceLimits: true,
          concurrency: null,
          limits: null,
          allowedOrigins: null,
        },
      },
    ]);
    const next = page.headers.get('link')!.match(/^<([^>]+)>; rel="next"$/)![1]!;
    const older = await admin.request('GET', next);
    expect(older.body[0].id).toBeLessThan(page.body[3].id);

    const everything = JSON.stringify(await t.db.query('SELECT * FROM admin_audit')) + JSON.stringify(t.logs.entries());
    expect(everything).not.toContain(created.body.key);
    expect(everything).not.toContain(admin.write.token);
    // Each admin request's log line names its token.
    expect(t.logs.entries().some((entry) => entry.adminTokenId === writer && entry.route === '/admin/v1/keys/:id/rotate')).toBe(true);
  });
});

describe('the development key', () => {
  test('is in the audit trail, as issued by the development key greeting', async () => {
    // An embedded database with no keys yet: a newcomer's first start.
    const app = await buildApp(loadConfig({ DATABASE_URL: '', DATA_DIR: 'memory://' }), { logStream: captureLogs().stream });
    try {
      expect(await developmentKeyGreeting(app)).toMatch(/psk_/);
      const [key] = await app.apiKeysRepository.list();
      const admin = await openAdmin(app);
      try {
        const trail = (await admin.request('GET', '/admin/v1/audit?limit=100')).body as Array<{ action: string; keyId: number | null }>;
        expect(trail.find((entry) => entry.action === 'key.create' && entry.keyId === key!.id)).toMatchObject({
          actor: 'system:development-key',
          adminTokenId: null,
          requestId: null,
          details: { plan: 'business', name: 'development' },
        });
      } finally {
        await admin.close();
      }
    } finally {
      await app.close();
    }
  });
});
