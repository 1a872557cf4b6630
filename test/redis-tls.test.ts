import { execFileSync, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { eventually } from './support/eventually.js';
import { cleanupStack, expect, tempDirTest } from './support/fixtures.js';
import { freePort } from './support/free-port.js';
import { bearer } from './support/keys.js';
import { developmentKey, startServer } from './support/processes.js';

// A single Redis over TLS with AUTH (rediss://, issue #20), as managed offerings require: a real
// redis-server with a certificate of its own, trusted by the server process through Node's NODE_EXTRA_CA_CERTS.

const PASSWORD = `pw-${randomUUID()}`;

const test = tempDirTest('pets-redis-tls-').extend('tlsRedis', { scope: 'file' }, async ({ dir }, { onCleanup }) => {
  const defer = cleanupStack(onCleanup);
  const [cert, key] = [join(dir, 'cert.pem'), join(dir, 'key.pem')];
  const subject = ['-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'];
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', ...subject, '-keyout', key, '-out', cert], {
    stdio: 'ignore',
  });
  const port = await freePort();
  const tls = ['--port', '0', '--tls-port', String(port), '--tls-cert-file', cert, '--tls-key-file', key, '--tls-auth-clients', 'no'];
  const server = spawn('redis-server', [...tls, '--requirepass', PASSWORD, '--save', '', '--appendonly', 'no', '--bind', '127.0.0.1'], {
    stdio: 'ignore',
  });
  defer(() => server.kill('SIGKILL'));
  const client = new Redis({ host: '127.0.0.1', port, password: PASSWORD, tls: { ca: readFileSync(cert) }, lazyConnect: true });
  client.on('error', () => {});
  defer(() => client.disconnect());
  await eventually(() =>
    client.connect().then(
      () => true,
      () => false,
    ),
  );
  return { port, cert, client };
});

test('a single Redis over TLS with AUTH counts in Redis, trusting a private CA through NODE_EXTRA_CA_CERTS', async ({ tlsRedis }) => {
  const prefix = `tls:${randomUUID()}:`;
  const server = await startServer({
    env: {
      DATA_DIR: 'memory://',
      DATABASE_URL: '',
      REDIS_URL: `rediss://:${PASSWORD}@127.0.0.1:${tlsRedis.port}`,
      REDIS_KEY_PREFIX: prefix,
      NODE_EXTRA_CA_CERTS: tlsRedis.cert,
    },
  });
  try {
    const headers = bearer(await developmentKey(server));
    for (let i = 0; i < 3; i++) expect((await fetch(`${server.origin}/v1/pets?limit=1`, { headers })).status).toBe(200);
    expect((await tlsRedis.client.keys(`${prefix}*`)).length).toBeGreaterThan(0);
    expect(server.output()).not.toContain('Redis unreachable');
  } finally {
    await server.stop('SIGKILL');
  }
});
