import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { eventually } from '../support/eventually.js';
import { cleanupStack, expect, tempDirTest } from '../support/fixtures.js';
import { bearer, developmentKey } from '../support/keys.js';
import { spawnDaemon, waitFor, withFreshPorts, type Daemon } from '../support/engines/daemon.js';
import { describeNeeding, NEEDS } from '../support/engines/index.js';
import { startServer } from '../../harness/processes.js';

// Redis over TLS with AUTH (issue #20), as managed offerings require: real redis-servers with a
// certificate of their own, trusted by the server process through Node's NODE_EXTRA_CA_CERTS. One
// Redis (rediss://), and a Redis Cluster whose nodes speak TLS to clients and to one another.

const PASSWORD = `pw-${randomUUID()}`;
const HOST = '127.0.0.1';

/** A self-signed certificate for 127.0.0.1, its key beside it. */
const certified = tempDirTest('pets-redis-tls-').extend('certificate', { scope: 'file' }, async ({ dir }) => {
  const [cert, key] = [join(dir, 'cert.pem'), join(dir, 'key.pem')];
  const subject = ['-subj', `/CN=${HOST}`, '-addext', `subjectAltName=IP:${HOST}`];
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', ...subject, '-keyout', key, '-out', cert], {
    stdio: 'ignore',
  });
  return { cert, key, tlsArgs: ['--port', '0', '--tls-cert-file', cert, '--tls-key-file', key, '--tls-auth-clients', 'no'] };
});

/** A redis-server on a TLS port with AUTH, killed at the fixture's end. */
function spawnTlsRedis(args: string[], defer: (undo: () => unknown) => void): Daemon {
  const server = spawnDaemon(
    'redis-server',
    'redis-server',
    [...args, '--requirepass', PASSWORD, '--save', '', '--appendonly', 'no', '--bind', HOST],
    {
      cwd: tmpdir(),
    },
  );
  defer(() => server.stop('SIGKILL'));
  return server;
}

/** A loaded machine takes seconds to start a redis-server and complete TLS handshakes. */
const START_TIMEOUT_MS = 30_000;

/**
 * A client of one node over TLS, trusting the test's certificate; ready once the node answers. It
 * waits for the client's state, not for a connect() of its own: ioredis retries a refused attempt
 * by itself, and refuses every connect() made once that retry has succeeded.
 */
async function tlsClient(
  node: { port: number; daemon: Daemon },
  cert: string,
  defer: (undo: () => unknown) => void,
  password: string | undefined = PASSWORD,
) {
  const client = new Redis({ host: HOST, port: node.port, password, tls: { ca: readFileSync(cert) }, lazyConnect: true });
  client.on('error', () => {});
  defer(() => client.disconnect());
  const ready = async () => {
    if (client.status === 'wait' || client.status === 'end') client.connect().catch(() => {});
    return client.status === 'ready';
  };
  // A node that exited (its port taken meanwhile) fails at once with its output, for withFreshPorts.
  await waitFor(`${node.daemon.name} on TLS port ${node.port} ready`, ready, { daemons: [node.daemon], timeoutMs: START_TIMEOUT_MS });
  return client;
}

const test = certified
  .extend('tlsRedis', { scope: 'file' }, async ({ certificate }, { onCleanup }) => {
    return cleanupStack(onCleanup, (defer) =>
      withFreshPorts(1, async ([port]) => {
        const daemon = spawnTlsRedis([...certificate.tlsArgs, '--tls-port', String(port)], defer);
        return { port: port!, client: await tlsClient({ port: port!, daemon }, certificate.cert, defer) };
      }),
    );
  })
  .extend('tlsCluster', { scope: 'file' }, async ({ certificate, dir }, { onCleanup }) => {
    return cleanupStack(onCleanup, (defer) =>
      // Each node's client port, then each one's cluster bus port.
      withFreshPorts(6, async (free) => {
        const ports = free.slice(0, 3);
        const daemons = ports.map((port, index) =>
          spawnTlsRedis(
            [
              ...certificate.tlsArgs,
              '--tls-port',
              String(port),
              '--tls-cluster',
              'yes',
              '--tls-ca-cert-file',
              certificate.cert,
              '--cluster-enabled',
              'yes',
              '--cluster-port',
              String(free[3 + index]),
              '--cluster-config-file',
              join(dir, `nodes-${port}.conf`),
              '--masterauth',
              PASSWORD,
            ],
            defer,
          ),
        );
        const clients = await Promise.all(
          ports.map((port, index) => tlsClient({ port, daemon: daemons[index]! }, certificate.cert, defer)),
        );
        const nodes = ports.map((port) => `${HOST}:${port}`);
        const tls = ['--tls', '--cacert', certificate.cert, '-a', PASSWORD, '--no-auth-warning'];
        execFileSync('redis-cli', [...tls, '--cluster', 'create', ...nodes, '--cluster-replicas', '0', '--cluster-yes'], {
          stdio: 'ignore',
        });
        await eventually(async () => (await clients[0]!.cluster('INFO')).includes('cluster_state:ok'), START_TIMEOUT_MS);
        return { nodes, clients };
      }),
    );
  });

/** A master over TLS with AUTH, and a Sentinel on a TLS port of its own that monitors it over TLS. */
const withSentinel = test.extend('tlsSentinel', { scope: 'file' }, async ({ certificate, dir }, { onCleanup }) => {
  return cleanupStack(onCleanup, (defer) =>
    withFreshPorts(2, async ([masterPort, sentinelPort]) => {
      const daemon = spawnTlsRedis(
        [...certificate.tlsArgs, '--tls-port', String(masterPort), '--tls-ca-cert-file', certificate.cert],
        defer,
      );
      const master = await tlsClient({ port: masterPort!, daemon }, certificate.cert, defer);
      const config = join(dir, 'sentinel.conf');
      writeFileSync(
        config,
        [
          'port 0',
          `tls-port ${sentinelPort}`,
          `tls-cert-file ${certificate.cert}`,
          `tls-key-file ${certificate.key}`,
          `tls-ca-cert-file ${certificate.cert}`,
          'tls-auth-clients no',
          'tls-replication yes',
          `bind ${HOST}`,
          `dir ${dir}`,
          `sentinel monitor pets ${HOST} ${masterPort} 1`,
          `sentinel auth-pass pets ${PASSWORD}`,
          '',
        ].join('\n'),
      );
      const sentinel = spawnDaemon('redis-sentinel', 'redis-server', [config, '--sentinel'], { cwd: dir });
      defer(() => sentinel.stop('SIGKILL'));
      const asked = await tlsClient({ port: sentinelPort!, daemon: sentinel }, certificate.cert, defer, undefined);
      await eventually(async () => (await asked.call('SENTINEL', 'get-master-addr-by-name', 'pets')) !== null, START_TIMEOUT_MS);
      return { sentinel: `${HOST}:${sentinelPort}`, master };
    }),
  );
});

/** The built server on the embedded database with the given Redis settings; its development key. */
async function serverWith(env: Record<string, string>, cert: string) {
  // REDIS_URL cleared: CI sets one for the other tests, and it may not be combined with the other modes.
  const server = await startServer({ env: { DATA_DIR: 'memory://', DATABASE_URL: '', REDIS_URL: '', NODE_EXTRA_CA_CERTS: cert, ...env } });
  return { server, headers: bearer(await developmentKey(server)) };
}

/**
 * A server with these Redis settings counts each of three requests, in Redis: the keys under its
 * prefix are on one of `nodes`, and it never fell back to memory.
 */
async function expectCountedInRedis(env: Record<string, string>, cert: string, nodes: Redis[]) {
  const prefix = `tls:${randomUUID()}:`;
  const { server, headers } = await serverWith({ ...env, REDIS_KEY_PREFIX: prefix }, cert);
  try {
    const remaining = new Set<string | null>();
    for (let i = 0; i < 3; i++) {
      const response = await fetch(`${server.origin}/v1/pets?limit=1`, { headers });
      expect(response.status).toBe(200);
      remaining.add(response.headers.get('x-ratelimit-remaining'));
    }
    expect(remaining.size, 'each request counted').toBe(3);
    const held = await Promise.all(nodes.map((node) => node.keys(`${prefix}*`)));
    expect(held.flat().length).toBeGreaterThan(0);
    expect(server.output()).not.toContain('Redis unreachable');
  } finally {
    await server.stop('SIGKILL');
  }
}

describeNeeding(NEEDS.redisServer, NEEDS.openssl)('Redis over TLS with AUTH', () => {
  test('a single Redis over TLS with AUTH counts in Redis, trusting a private CA through NODE_EXTRA_CA_CERTS', async ({
    tlsRedis,
    certificate,
  }) => {
    await expectCountedInRedis({ REDIS_URL: `rediss://:${PASSWORD}@${HOST}:${tlsRedis.port}` }, certificate.cert, [tlsRedis.client]);
  });

  test('a Redis Cluster over TLS with AUTH (REDIS_CLUSTER_NODES, REDIS_TLS, REDIS_PASSWORD) counts in the cluster', async ({
    tlsCluster,
    certificate,
  }) => {
    // One seed: the rest of the cluster, and the node that owns the key's slot, are found over TLS.
    const env = { REDIS_CLUSTER_NODES: tlsCluster.nodes[0]!, REDIS_TLS: 'true', REDIS_PASSWORD: PASSWORD };
    await expectCountedInRedis(env, certificate.cert, tlsCluster.clients);
  });

  withSentinel(
    'Sentinels and their master over TLS (REDIS_SENTINELS, REDIS_TLS): the server counts in the master',
    async ({ tlsSentinel, certificate }) => {
      const env = { REDIS_SENTINELS: tlsSentinel.sentinel, REDIS_SENTINEL_MASTER: 'pets', REDIS_TLS: 'true', REDIS_PASSWORD: PASSWORD };
      await expectCountedInRedis(env, certificate.cert, [tlsSentinel.master]);
    },
  );

  withSentinel(
    'a Redis that never completes its handshake (TLS Sentinels, REDIS_TLS unset) holds up no start: memory, said in the log',
    async ({ tlsSentinel, certificate }) => {
      const { server, headers } = await serverWith(
        { REDIS_SENTINELS: tlsSentinel.sentinel, REDIS_SENTINEL_MASTER: 'pets', REDIS_PASSWORD: PASSWORD },
        certificate.cert,
      );
      try {
        // Log lines are written in batches, within 100 ms.
        await eventually(async () => server.output().includes('rate limiting: Redis unreachable at start'));
        const response = await fetch(`${server.origin}/v1/pets?limit=1`, { headers });
        expect(response.status).toBe(200);
        expect(response.headers.get('x-ratelimit-remaining')).not.toBeNull();
      } finally {
        await server.stop('SIGKILL');
      }
    },
  );
});
