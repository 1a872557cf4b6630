import { execFileSync, spawn } from 'node:child_process';
import { pbkdf2, randomUUID } from 'node:crypto';
import { closeSync, constants, openSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import pino from 'pino';
import type { SonicBoom } from 'sonic-boom';
import { afterAll, describe, expect, it } from 'vitest';
import { logFormat, logOutput, roundMs } from '../../../src/platform/observability/log-output.js';
import { appTest, tempDirTest } from '../../support/fixtures.js';
import { ROOT, SERVICE_NODE_ARGS, startServer, type ServerProcess } from '../../../harness/processes.js';
import { eventually } from '../../support/eventually.js';
import type { TestApp } from '../../support/app.js';
import { hangUpOnceReceived, holdKeyLookups, rawGet } from '../../support/hang-up.js';
import { bearer, metricTotal } from '../../support/keys.js';

const test = appTest();
const fifoTest = tempDirTest('pets-log-');

describe('log format', () => {
  it('auto: pretty on a terminal, JSON when stdout is not one (a pipe, a file, a log driver)', () => {
    expect(logFormat('auto', true)).toBe('pretty');
    expect(logFormat('auto', false)).toBe('json');
    expect(logFormat('auto', undefined)).toBe('json');
    expect(logFormat('json', true)).toBe('json');
    expect(logFormat('pretty', undefined)).toBe('pretty');
  });

  it('pretty lines are for people: level, message and fields, no JSON', async () => {
    let written = '';
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        written += chunk.toString();
        done();
      },
    });
    const output = await logOutput('pretty', { destination: sink });
    pino(output.stream).info({ reqId: 'r-1', ms: 1.25, status: 200 }, 'request');
    await eventually(async () => written.includes('request'));
    const plain = written.replace(new RegExp(String.raw`\x1b\[[0-9;]*m`, 'g'), '');
    expect(plain).toMatch(/^\[\d{2}:\d{2}:\d{2}\.\d{3}\] INFO: request\n/);
    expect(plain).toContain('reqId: "r-1"');
    expect(plain).not.toContain('"level"');
  });
});

describe('JSON lines to a pipe whose reader has gone', () => {
  fifoTest('are dropped: flushing them at close returns, and logging after it writes nothing', async ({ dir }) => {
    const fifo = join(dir, 'log');
    execFileSync('mkfifo', [fifo]);
    // A reader opened first lets the writer open; closed, it leaves the pipe without one, as `| head` does once it has had enough.
    const reader = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
    const writer = openSync(fifo, 'w');
    closeSync(reader);
    const output = await logOutput('json', { destination: writer });
    const logger = pino(output.stream);
    logger.info('one');
    logger.info('two');
    await output.flush();
    logger.info('three');
    await output.flush();
    // The writer is left open: a write still under way when the test ends would meet a closed descriptor (EBADF) instead.
  });
});

describe('JSON lines, buffered', () => {
  /** A buffered (or, with `sync`, synchronous) JSON output to a file, with the size of each write it makes. */
  async function toFile(dir: string, sync = false) {
    // The directory is the file's: the pipe test's FIFO may be in it.
    const file = join(dir, `${randomUUID()}.log`);
    const output = await logOutput('json', { destination: openSync(file, 'w'), sync });
    const sonic = output.stream as SonicBoom;
    const writes: number[] = [];
    const waiting: Array<{ count: number; resolve: () => void }> = [];
    // Not the empty write of a flush that found nothing waiting.
    sonic.on('write', (bytes: number) => {
      if (bytes === 0) return;
      writes.push(bytes);
      for (const { count, resolve } of waiting) if (writes.length >= count) resolve();
    });
    return {
      sonic,
      logger: pino(output.stream),
      writes,
      /** Resolves once this many writes are done: the file can hold their bytes before the stream says so. */
      wrote: (count: number) =>
        writes.length >= count ? Promise.resolve() : new Promise<void>((resolve) => void waiting.push({ count, resolve })),
      lines: () => readFileSync(file, 'utf8').split('\n').filter(Boolean),
      // Ends the stream, which closes the file and stops the flush timer.
      close: () => new Promise<void>((resolve) => sonic.once('close', () => resolve()).end()),
    };
  }

  fifoTest('lines logged together, under 4 KiB, leave in one write once the flush interval is up', async ({ dir, onTestFinished }) => {
    const log = await toFile(dir);
    onTestFinished(log.close);
    for (let i = 0; i < 10; i++) log.logger.info({ i }, 'request');
    await log.wrote(1);
    expect(log.lines()).toHaveLength(10);
    expect(log.writes).toEqual([Buffer.byteLength(log.lines().join('\n') + '\n')]);
  });

  fifoTest('4 KiB of lines leave at once, in one write', async ({ dir, onTestFinished }) => {
    const log = await toFile(dir);
    onTestFinished(log.close);
    const text = 'x'.repeat(100);
    for (let i = 0; i < 40; i++) log.logger.info({ i, text }, 'request');
    await log.wrote(1);
    expect(log.writes[0]).toBeGreaterThanOrEqual(4096);
  });

  fifoTest('ended while lines wait: they are written, and the flush timer the last write armed fires on nothing', async ({ dir }) => {
    const log = await toFile(dir);
    for (let i = 0; i < 10; i++) log.logger.info({ i }, 'request');
    // The close after the last write waits for the file's fsync and close in libuv's thread pool,
    // past the flush interval on a loaded machine: here the pool is kept busy longer than that.
    log.sonic.once('write', () => {
      for (let i = 0; i < 4; i++) pbkdf2(randomUUID(), 'salt', 300_000, 32, 'sha256', () => {});
    });
    await log.close();
    expect(log.lines()).toHaveLength(10);
  });

  fifoTest('with LOG_SYNC, each line is written before the call that logs it returns', async ({ dir, onTestFinished }) => {
    const log = await toFile(dir, true);
    onTestFinished(log.close);
    for (let i = 0; i < 3; i++) {
      log.logger.info({ i }, 'request');
      expect(log.lines()).toHaveLength(i + 1);
    }
  });
});

/** Sends each request in turn, without an API key (401, a request line each); returns their request ids. */
async function requests(server: ServerProcess, count: number, afterEach?: (ids: string[]) => void) {
  const ids: string[] = [];
  for (let i = 0; i < count; i++) {
    const response = await fetch(`${server.origin}/v1/pets`);
    await response.arrayBuffer();
    ids.push(response.headers.get('x-request-id')!);
    afterEach?.(ids);
  }
  return ids;
}

/** The request ids of the request lines the server has written so far. */
const loggedRequests = (server: ServerProcess) =>
  new Set(
    server
      .output()
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .map((line) => JSON.parse(line) as { msg: string; reqId?: string })
      .filter((line) => line.msg === 'request')
      .map((line) => line.reqId),
  );

describe('the server loses no log line', { timeout: 120_000 }, () => {
  // The first two tests share a server, a start on PGlite being seconds of CPU: the lone request
  // comes first, on a server that has had no traffic; the SIGTERM test stops it.
  let started: Promise<ServerProcess> | undefined;
  const defaultServer = () => (started ??= startServer({ env: { DATA_DIR: 'memory://' } }));
  afterAll(async () => void (await (await started)?.stop('SIGKILL')));

  it('a lone request: its line is written within the flush interval, with no further traffic', async () => {
    const server = await defaultServer();
    const [id] = await requests(server, 1);
    await eventually(async () => loggedRequests(server).has(id), 10_000);
  });

  it('at SIGTERM: the lines of the requests answered just before are all written by the exit', async () => {
    const server = await defaultServer();
    const ids = await requests(server, 30);
    expect(await server.stop('SIGTERM')).toBe(0);
    expect(ids.filter((id) => !loggedRequests(server).has(id))).toEqual([]);
  });

  it('on a fatal error: the error line, and the lines of the requests before it, are written by the exit', async () => {
    const server = await startServer({
      env: { DATA_DIR: 'memory://' },
      nodeArgs: [...SERVICE_NODE_ARGS, '--import', 'tsx', '--import', './test/support/uncaught-on-signal.ts', 'dist/server.js'],
    });
    const ids = await requests(server, 30);
    expect(await server.stop('SIGUSR2')).toBe(1);
    expect(ids.filter((id) => !loggedRequests(server).has(id))).toEqual([]);
    const fatal = server
      .output()
      .split('\n')
      .find((line) => line.includes('closing after an uncaught error'));
    expect(JSON.parse(fatal!)).toMatchObject({ level: 50, err: { message: 'uncaught on SIGUSR2' } });
  });

  it("with LOG_SYNC: a request's line is written before the server reads the next request", async () => {
    const server = await startServer({ env: { DATA_DIR: 'memory://', LOG_SYNC: 'true' } });
    // A request's line is written once its response has left, so the check is of the one before.
    await requests(server, 10, (ids) => {
      if (ids.length > 1) expect(loggedRequests(server).has(ids.at(-2))).toBe(true);
    });
    expect(await server.stop('SIGTERM')).toBe(0);
  });
});

describe('a request whose client goes away before its answer', () => {
  const clientClosedLines = (t: TestApp, method: string) =>
    t.logs.entries().filter((entry) => entry.msg === 'request' && entry.method === method && entry.clientClosed === true);

  test('is one line all the same, with clientClosed and no status: a POST aborted mid-body', async ({ t, port }) => {
    await hangUpOnceReceived(
      t.app,
      port,
      `POST /v1/pets HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: ${t.auth.authorization}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"name":`,
    );
    await eventually(async () => clientClosedLines(t, 'POST').length === 1);
    const [line] = clientClosedLines(t, 'POST');
    expect(line).toMatchObject({ level: 30, route: '/v1/pets', clientClosed: true, keyId: expect.any(Number) });
    expect(line).not.toHaveProperty('status');
    expect(typeof line!.ms).toBe('number');
  });

  test('a GET whose client hangs up while its key is looked up (issue 45: no line at all)', async ({ t, port }) => {
    const { key } = await t.app.apiKeysRepository.create({ plan: 'free' });
    const decided = await metricTotal(t.app, 'rate_limit_decisions_total');
    const lookups = await holdKeyLookups(t.app.db);
    await hangUpOnceReceived(t.app, port, rawGet(bearer(key)));
    await lookups.release();
    // Looked up and decided once it was gone: still its one line.
    await eventually(async () => (await metricTotal(t.app, 'rate_limit_decisions_total')) === decided + 1);
    expect(clientClosedLines(t, 'GET')).toEqual([expect.objectContaining({ route: '/v1/pets', clientClosed: true })]);
  });
});

describe('durations', () => {
  it('are milliseconds rounded to two decimals (10 µs)', () => {
    expect(roundMs(1.23456)).toBe(1.23);
    expect(roundMs(0.126)).toBe(0.13);
    expect(roundMs(0.004)).toBe(0);
    expect(roundMs(250)).toBe(250);
    expect(roundMs(31.9999)).toBe(32);
  });

  test("the request line's ms has at most two decimals", async ({ t, request }) => {
    for (let i = 0; i < 5; i++) await request('GET', '/v1/pets');
    const lines = t.logs.entries().filter((entry) => entry.msg === 'request');
    expect(lines.length).toBeGreaterThanOrEqual(5);
    for (const { ms } of lines) {
      expect(typeof ms).toBe('number');
      expect(String(ms)).toMatch(/^\d+(\.\d{1,2})?$/);
    }
  });
});

/** Runs the server until it says it is ready, under a pseudo-terminal (script(1)) or with stdout piped; resolves with what it printed. */
function runServer(tty: boolean): Promise<string> {
  const node = [process.execPath, ...SERVICE_NODE_ARGS, 'dist/server.js'];
  const [command, ...args] = tty ? ['script', '-qfec', node.map((arg) => `'${arg}'`).join(' '), '/dev/null'] : node;
  const child = spawn(command!, args, {
    cwd: ROOT,
    detached: true,
    stdio: ['pipe', 'pipe', 'pipe'],
    env: { ...process.env, DATABASE_URL: '', DATA_DIR: 'memory://', PORT: '0', METRICS_PORT: '0', LOG_LEVEL: 'info', LOG_FORMAT: 'auto' },
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => finish(new Error(`not ready within 60 s:\n${output}`)), 60_000);
    const finish = (error?: Error) => {
      clearTimeout(timer);
      child.stdout.removeAllListeners('data');
      // The whole group: script(1) and the server under it.
      child.once('exit', () => (error ? reject(error) : resolve(output)));
      process.kill(-child.pid!, 'SIGTERM');
    };
    child.stdout.on('data', () => {
      if (output.includes('pet store ready')) finish();
    });
    child.once('error', reject);
  });
}

describe('the server', () => {
  // One start with its output piped is read by both tests: a start on PGlite is seconds of CPU.
  let pipedStart: Promise<string> | undefined;
  const startPiped = () => (pipedStart ??= runServer(false));

  it('prints pretty lines on a terminal, JSON lines when its output is piped', { timeout: 120_000 }, async () => {
    const [onTerminal, piped] = await Promise.all([runServer(true), startPiped()]);
    expect(onTerminal).toMatch(/INFO.*pet store ready/);
    expect(onTerminal).not.toContain('"msg":"pet store ready"');
    const ready = piped.split('\n').find((line) => line.includes('pet store ready'))!;
    expect(JSON.parse(ready)).toMatchObject({ level: 30, msg: 'pet store ready' });
  });

  it(
    'says what it does while it starts: the database, the migrations, then where the API and its docs are',
    { timeout: 120_000 },
    async () => {
      const lines = (await startPiped())
        .split('\n')
        .filter((line) => line.startsWith('{'))
        .map((line) => JSON.parse(line));
      expect(lines.map((line) => line.msg)).toEqual(
        // A new embedded database starts from the kept template, migrations included (src/platform/db/pglite.ts).
        expect.arrayContaining(['opening the embedded database', 'database schema is current', 'pet store ready']),
      );
      expect(lines.find((line) => line.msg === 'pet store ready')).toMatchObject({
        docs: expect.stringMatching(/^http:\/\/127\.0\.0\.1:\d+\/docs$/),
      });
    },
  );
});
