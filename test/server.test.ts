import { once } from 'node:events';
import { createServer, type AddressInfo } from 'node:net';
import { describe, expect } from 'vitest';
import { tempDirTest } from './support/fixtures.js';
import { run, startServer } from '../harness/processes.js';
import { freePort } from '../harness/free-port.js';
import { bearer, developmentKey } from './support/keys.js';

// The embedded database's data directory, kept across the restarts of one test.
const test = tempDirTest('pets-data-');

describe('the server process', () => {
  test('refuses a bad setting with one line naming the variable, and a non-zero exit', async () => {
    for (const [name, value] of [
      ['PORT', 'eighty'],
      ['KEY_CACHE_MAX_ENTRIES', '1e6'],
      ['LOG_LEVEL', 'loud'],
      ['PUBLIC_BASE_URL', 'https://api.example.com/v2'],
      ['DATABASE_URL', 'mysql://localhost/pets'],
    ] as const) {
      const { code, stdout, stderr } = await run(['dist/server.js'], { [name]: value });
      expect(code).not.toBe(0);
      expect(stdout).toBe('');
      expect(stderr.trim().split('\n')).toHaveLength(1);
      expect(stderr).toContain(name);
    }
  });

  test('quotes a bad URL setting in its one line without the password in it', async () => {
    for (const [name, env] of [
      ['DATABASE_URL', { DATABASE_URL: 'mysql://pets:s3cret@db/pets' }],
      [
        'DATABASE_REPLICA_URLS',
        { DATABASE_URL: 'postgres://pets@127.0.0.1:1/pets', DATABASE_REPLICA_URLS: 'postgres://pets:s3cret@[replica/pets' },
      ],
      ['REDIS_URL', { REDIS_URL: 'redis://:s3cret@[redis' }],
      ['REDIS_URL', { REDIS_URL: 'http://pets:s3cret@redis:6379' }],
    ] as Array<[string, Record<string, string>]>) {
      const { code, stdout, stderr } = await run(['dist/server.js'], { DATA_DIR: 'memory://', DATABASE_URL: '', REDIS_URL: '', ...env });
      expect(code).toBe(1);
      expect(stderr.trim().split('\n'), stderr).toHaveLength(1);
      expect(stderr).toContain(`Invalid ${name}=`);
      expect(stdout + stderr).not.toContain('s3cret');
    }
  });

  test('stops before serving anything, with one line naming the setting, when a port is taken', async () => {
    const taken = createServer().listen(0, '127.0.0.1');
    await once(taken, 'listening');
    const port = String((taken.address() as AddressInfo).port);
    try {
      for (const [setting, env] of [
        ['METRICS_PORT', { PORT: String(await freePort()), METRICS_PORT: port }],
        ['ADMIN_PORT', { PORT: String(await freePort()), METRICS_PORT: '0', ADMIN_PORT: port }],
        ['PORT', { PORT: port, METRICS_PORT: '0' }],
      ] as const) {
        const { code, stdout, stderr } = await run(['dist/server.js'], { DATA_DIR: 'memory://', DATABASE_URL: '', ...env });
        expect(code).toBe(1);
        expect(stderr.trim().split('\n'), stderr).toHaveLength(1);
        expect(stderr).toContain(`Set ${setting} to a free port`);
        expect(stdout).not.toContain('Server listening');
        expect(stdout).not.toContain('psk_');
      }
    } finally {
      taken.close();
    }
  });

  test('serves the API on the embedded database without any install, keeps data across restarts, and stops cleanly', async ({
    dir: dataDir,
  }) => {
    const first = await startServer({ env: { DATA_DIR: dataDir } });
    const key = await developmentKey(first);
    const authorization = `Bearer ${key}`;
    const created = await fetch(`${first.origin}/v1/pets`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization },
      body: JSON.stringify({ name: 'Persisted', categoryId: 1, status: 'available' }),
    });
    expect(created.status).toBe(201);
    const pet = await created.json();
    expect(await first.stop('SIGTERM')).toBe(0);

    const second = await startServer({ env: { DATA_DIR: dataDir } });
    const fetched = await fetch(`${second.origin}/v1/pets/${pet.id}`, { headers: { authorization } });
    expect(fetched.status).toBe(200);
    expect(await fetched.json()).toEqual(pet);
    expect(second.output()).not.toContain('psk_');
    expect(await second.stop('SIGINT')).toBe(0);
  });

  test('keeps serving when whatever read its standard output has gone, and still stops cleanly on SIGTERM', async () => {
    // Every line of the log, and the development key's greeting, meets the closed pipe: in
    // batches (past 4 KiB of lines, and at close) and, with LOG_SYNC, each line on its own.
    for (const env of [{}, { LOG_SYNC: 'true' }] as Array<Record<string, string>>) {
      const server = await startServer({ env: { DATA_DIR: 'memory://', ...env }, stdoutClosed: true });
      for (let i = 0; i < 30; i++) expect((await fetch(`${server.origin}/v1/pets`)).status).toBe(401);
      expect((await fetch(`${server.origin}/healthz`)).status).toBe(200);
      expect(await server.stop('SIGTERM')).toBe(0);
    }
  });

  test('prints a development key with a curl line on first embedded start, never into the log', async () => {
    const server = await startServer({ env: { DATA_DIR: 'memory://' } });
    const key = await developmentKey(server);
    const curl = server.output().match(/curl -H 'Authorization: Bearer (psk_\S+)' (\S+)/);
    expect(curl?.[1]).toBe(key);
    expect(curl?.[2]).toBe(`${server.origin}/v1/pets`);
    const response = await fetch(curl![2]!, { headers: bearer(key) });
    expect(response.status).toBe(200);
    // Stopped first: every log line is written by then.
    expect(await server.stop()).toBe(0);
    const logLines = server
      .output()
      .split('\n')
      .filter((line) => line.startsWith('{'));
    expect(logLines.length).toBeGreaterThan(0);
    expect(logLines.join('\n')).not.toContain(key);
  });
});
