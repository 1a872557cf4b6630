/**
 * `npm run bench [-- --smoke]`: the service against a bare Fastify and a bare Fastify + pg,
 * in one run on one machine, written to bench/results/latest.md (smoke.md for --smoke) and .json.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createSeededPostgres, seedPglite } from './fixtures.js';
import { drawRequest, load, requestsOf, type Measurement, type RequestShape, type RequestSpec } from './load.js';
import { parseOptions, type BenchOptions } from './options.js';
import { ROOT, startServer, type ServerProcess, type ServerSpec } from '../harness/processes.js';
import { assertRedisUp, commandCalls, countKeys, deleteKeys } from '../harness/redis.js';
import { buildService, watchSteal } from './processes.js';
import {
  concurrencyCosts,
  errorsOf,
  evaluateGoals,
  renderMarkdown,
  summarize,
  type MemoryResult,
  type Round,
  type RowResult,
  type RunResult,
} from './report.js';
import { countWrites, perResponse } from './syscalls.js';
import {
  invalidKeyList,
  isExpected,
  LIMITS_OFF,
  operations,
  oursSpec,
  phases,
  samePages,
  serverSpecs,
  type Databases,
  type Row,
  type ServerName,
} from './scenarios.js';

const RESULTS_DIR = join(ROOT, 'bench/results');
const started = Date.now();
const say = (message: string) => console.log(`[bench ${((Date.now() - started) / 1000).toFixed(1)}s] ${message}`);

/** Starts every server at once; if one cannot start, the others are stopped again. */
async function startAll(specs: ServerSpec[]): Promise<Map<string, ServerProcess>> {
  const outcomes = await Promise.allSettled(specs.map((spec) => startServer({ ...spec, logDir: RESULTS_DIR })));
  const servers = outcomes.flatMap((outcome) => (outcome.status === 'fulfilled' ? [outcome.value] : []));
  const failure = outcomes.find((outcome) => outcome.status === 'rejected');
  if (failure) {
    await Promise.all(servers.map((server) => server.stop()));
    throw failure.reason;
  }
  return new Map(servers.map((server) => [server.name, server]));
}

/** Sends one request as the load would (fresh path and headers drawn). */
async function send(origin: string, request: RequestSpec): Promise<{ path: string; response: Response }> {
  const { method, path, headers, body } = drawRequest(request);
  return { path, response: await fetch(origin + path, { method, headers, body }) };
}

/**
 * One request of every kind each row sends, before any load: a scenario that cannot succeed (a
 * wrong key, a bad path) stops the run here with the reason. It also takes each server's cold
 * first request.
 */
async function preflight(rows: Row[], servers: Map<string, ServerProcess>): Promise<void> {
  for (const row of rows) {
    const { id, server, shape } = row;
    for (const request of requestsOf(shape)) {
      const { path, response } = await send(servers.get(server)!.origin, request);
      if (!isExpected(row, response.status))
        throw new Error(`${id}: the first ${request.method} ${path} got ${response.status} ${await response.text()}`);
      await response.arrayBuffer();
    }
  }
}

/** The ids of the pets a listing answered, in order. */
async function idsOf(origin: string, request: RequestSpec): Promise<number[]> {
  const { path, response } = await send(origin, request);
  if (!response.ok) throw new Error(`${request.method} ${path} got ${response.status} ${await response.text()}`);
  return ((await response.json()) as Array<{ id: number }>).map((pet) => pet.id);
}

/** bare+pg must answer the service's pages with the same pets, or the ratios would compare different work. */
async function assertSamePages(databases: Databases, servers: Map<string, ServerProcess>): Promise<void> {
  for (const store of ['ours-memory', 'ours-redis'] as const) {
    for (const { name, ours, baseline } of samePages(databases.postgres)) {
      const [oursIds, baselineIds] = await Promise.all([
        idsOf(servers.get(store)!.origin, ours),
        idsOf(servers.get('bare-pg')!.origin, baseline),
      ]);
      if (oursIds.join() !== baselineIds.join()) {
        throw new Error(`${store} and bare-pg answer ${name} with different pets: ${oursIds.join()} against ${baselineIds.join()}`);
      }
    }
  }
}

/** What GET /v1/rate_limit tells a key of the limits it runs under. */
interface RateLimitStatus {
  concurrency: { limit: number | null };
  costs: Record<string, number>;
}

/**
 * Every server of ours runs under the limits its rows claim, asked through GET /v1/rate_limit with
 * the run's key: no concurrency limit and every operation costing 1 (issue #38's limits off), but
 * on the servers with concurrency limits on (`concurrent`), whose limit must exceed the run's
 * connections (or their rows would be refused 429). It costs each key one of the 60 lookups a minute the endpoint allows.
 */
async function assertLimits(
  databases: Databases,
  servers: Map<string, ServerProcess>,
  concurrent: ReadonlySet<string>,
  options: BenchOptions,
): Promise<void> {
  for (const server of servers.values()) {
    if (!server.name.startsWith('ours-')) continue;
    const fixture = server.name === 'ours-pglite' ? databases.pglite : databases.postgres;
    const response = await fetch(`${server.origin}/v1/rate_limit`, { headers: { authorization: `Bearer ${fixture.apiKey}` } });
    if (response.status !== 200) throw new Error(`${server.name}: GET /v1/rate_limit got ${response.status} ${await response.text()}`);
    const { concurrency, costs } = (await response.json()) as RateLimitStatus;
    const priced = Object.entries(costs).filter(([, cost]) => cost !== 1);
    if (priced.length > 0)
      throw new Error(`${server.name}: operations priced (RATE_LIMIT_COSTS should be empty): ${JSON.stringify(priced)}`);
    if (!concurrent.has(server.name)) {
      if (concurrency.limit !== null)
        throw new Error(`${server.name}: a concurrency limit of ${concurrency.limit}, where it should have none`);
    } else if (concurrency.limit === null || concurrency.limit <= options.connections) {
      throw new Error(
        `${server.name}: a concurrency limit of ${concurrency.limit ?? 'none'} for the run's key, where it should have one above ` +
          `the run's ${options.connections} connections`,
      );
    }
  }
}

/** The ETags of the revalidated pages as a client read them: the read phase leaves the table as it is, so they stay current. */
async function etagsOf(databases: Databases, server: ServerProcess): Promise<{ list: string; fullPage: string }> {
  const etagOf = async (request: RequestSpec) => {
    const { path, response } = await send(server.origin, request);
    const etag = response.headers.get('etag');
    await response.arrayBuffer();
    if (response.status !== 200 || !etag) throw new Error(`GET ${path} got ${response.status} without an ETag`);
    return etag;
  };
  const ours = operations(databases.postgres);
  return { list: await etagOf(ours.list), fullPage: await etagOf(ours.fullPage) };
}

/**
 * The calls to Redis a server made over a measurement, from INFO commandstats (counted for every
 * client of the Redis, but only the measured server is under load): the rate limiter's script calls
 * (EVALSHA, EVAL) and its releases sent on their own (ZREM; the script expires given-back leases
 * rather than ZREMing them, so these are the releases alone). Other commands are left out: ZADD,
 * for one, counts the script's own writes and the leases' renewals.
 */
async function countRedisCalls(redisUrl: string): Promise<() => Promise<{ scripts: number; releases: number }>> {
  const counts = async () => {
    const { evalsha = 0, eval: evals = 0, zrem = 0 } = await commandCalls(redisUrl);
    return { scripts: evalsha + evals, releases: zrem };
  };
  const before = await counts();
  return async () => {
    const after = await counts();
    return { scripts: after.scripts - before.scripts, releases: after.releases - before.releases };
  };
}

/** A warm-up, whose numbers are kept only so that its errors can be reported too, then the measurement. */
async function measure(
  server: ServerProcess,
  shape: RequestShape,
  options: BenchOptions,
  redisUrl: string | undefined,
): Promise<{ warmup: Measurement; round: Round }> {
  server.assertRunning();
  const warmup = await load(server.origin, shape, options.connections, { seconds: options.warmupSeconds });
  const redisCalls = redisUrl === undefined ? undefined : await countRedisCalls(redisUrl);
  const cpuBefore = server.cpuSeconds();
  const systemBefore = server.systemCpuSeconds();
  const stolen = watchSteal();
  const measured = await load(server.origin, shape, options.connections, { seconds: options.durationSeconds });
  const perResponse = (seconds: number) => (seconds * 1e6) / Math.max(1, measured.responses);
  const round: Round = {
    ...measured,
    serverCpuUsPerResponse: perResponse(server.cpuSeconds() - cpuBefore),
    serverSystemCpuUsPerResponse: perResponse(server.systemCpuSeconds() - systemBefore),
    stealShare: stolen(),
  };
  if (redisCalls) {
    const { scripts, releases } = await redisCalls();
    round.redisCallsPerResponse = {
      scripts: scripts / Math.max(1, measured.responses),
      releases: releases / Math.max(1, measured.responses),
    };
  }
  // A server that died during the measurement would otherwise show up as a row of errors.
  server.assertRunning();
  return { warmup, round };
}

/** Connections while strace counts writes: few, as its stops slow the server down many times over. */
const STRACE_CONNECTIONS = 10;
/** Why writes could not be counted (no strace, no right to trace): the first failure, after which none is tried. */
let straceUnavailable: string | undefined;

/**
 * A row's requests once more, a fixed number of them, with strace attached to its server: the
 * write system calls per response, by where they went (the client's socket, the log file, ...).
 */
async function countRowWrites(result: RowResult, server: ServerProcess, options: BenchOptions): Promise<void> {
  if (options.straceRequests === 0 || straceUnavailable) return;
  try {
    let measured: Measurement | undefined;
    const writes = await countWrites(server, async () => {
      measured = await load(server.origin, result.row.shape, STRACE_CONNECTIONS, { requests: options.straceRequests });
      return measured.responses;
    });
    server.assertRunning();
    result.writes = { ...writes, errors: errorsOf(result.row, measured!) };
    say(
      `writes ${result.row.id}: ${perResponse(writes, 'client').toFixed(2)} to the client's socket and ` +
        `${perResponse(writes, 'log').toFixed(2)} to the log per response (${JSON.stringify(writes.clientByCall)})`,
    );
  } catch (error) {
    server.assertRunning();
    straceUnavailable = (error as Error).message;
    say(`writes not counted: ${straceUnavailable}`);
  }
}

/**
 * Each row in turn, round after round (A B A B ...), so slow spells of the machine hit every row
 * alike; then each row's writes counted.
 */
async function alternate(
  rows: Row[],
  servers: Map<string, ServerProcess>,
  redisServers: ReadonlySet<ServerName>,
  options: BenchOptions,
): Promise<RowResult[]> {
  await preflight(rows, servers);
  const results = rows.map((row): RowResult => ({ row, rounds: [], warmups: [] }));
  for (let number = 1; number <= options.rounds; number++) {
    for (const result of results) {
      const { server } = result.row;
      const { warmup, round } = await measure(
        servers.get(server)!,
        result.row.shape,
        options,
        redisServers.has(server) ? options.redisUrl : undefined,
      );
      result.warmups.push(warmup);
      result.rounds.push(round);
      const calls = round.redisCallsPerResponse;
      say(
        `round ${number}/${options.rounds} ${result.row.id}: ${Math.round(round.requestsPerSecond)} req/s, p99 ${round.p99Ms} ms, ` +
          `${errorsOf(result.row, round)} errors, ${Math.round(round.serverCpuUsPerResponse)} µs CPU/req, ` +
          `steal ${Math.round(round.stealShare * 100)}%` +
          (calls ? `, Redis ${calls.scripts.toFixed(2)} script calls and ${calls.releases.toFixed(2)} releases/req` : ''),
      );
    }
  }
  for (const result of results) await countRowWrites(result, servers.get(result.row.server)!, options);
  return results;
}

/**
 * Connections of the memory scenario. Once its address is banned, each refusal waits for the
 * instance to catch up with the key notices (a round every 100 ms at most, shared by all waiting):
 * a connection gets about ten answers a second, so a million requests need a crowd, as a flood has.
 */
const MEMORY_CONNECTIONS = 1_000;

/** On a fresh instance, so its RSS owes nothing to the other scenarios. */
async function measureMemory(server: ServerProcess, options: BenchOptions): Promise<MemoryResult> {
  await load(server.origin, invalidKeyList, MEMORY_CONNECTIONS, { seconds: options.warmupSeconds });
  const rssAfterWarmupBytes = server.rssBytes();
  say(`memory: ${options.memoryRequests} requests with random invalid keys, ${MEMORY_CONNECTIONS} connections`);
  const measured = await load(server.origin, invalidKeyList, MEMORY_CONNECTIONS, { requests: options.memoryRequests });
  server.assertRunning();
  const rssAfterBytes = server.rssBytes();
  const refusals = (measured.statuses['401'] ?? 0) + (measured.statuses['429'] ?? 0);
  const unexpected = measured.responses - refusals + measured.failed;
  return {
    requests: options.memoryRequests,
    connections: MEMORY_CONNECTIONS,
    rssAfterWarmupBytes,
    rssAfterBytes,
    measured,
    refusals,
    unexpected,
  };
}

/** The share of a shape's requests that are POSTs, each answered 201 when it succeeds. */
const postShare = (shape: RequestShape) =>
  requestsOf(shape).filter((request) => request.method === 'POST').length / requestsOf(shape).length;

/**
 * What makes the numbers meaningless: a row that got any error (every request of every row should
 * succeed), a mix of answers unlike the mix of requests, a server that crashed.
 */
function findProblems(
  rows: RowResult[],
  connections: number,
  memory: MemoryResult,
  exitCodes: Map<string, number | null>,
  redisKeys: number,
): string[] {
  const problems: string[] = [];
  for (const { row, rounds, warmups, writes } of rows) {
    const check = (measurement: Measurement, what: string) => {
      const errors = errorsOf(row, measurement);
      if (measurement.responses - (errors - measurement.failed) === 0)
        problems.push(`${row.id}: ${what} got no answer of the kind expected`);
      if (errors > 0) {
        const statuses = Object.entries(measurement.statuses).filter(([status]) => !isExpected(row, status));
        const detail = [
          ...statuses.map(([status, count]) => `${status}: ${count}`),
          ...(measurement.failed ? [`no response: ${measurement.failed}`] : []),
        ];
        problems.push(
          `${row.id}: ${what} got ${errors} errors (${detail.join(', ')}) of ${measurement.responses + measurement.failed} requests`,
        );
      }
      // Each connection sends its list in order, from the start, and a run ends mid-list: up to
      // length - 1 requests per connection may be missing from the end of a cycle.
      const { length } = requestsOf(row.shape);
      const expected = postShare(row.shape);
      const created = (measurement.statuses['201'] ?? 0) / Math.max(1, measurement.responses);
      const tolerance = 0.01 + ((length - 1) * connections) / (length * Math.max(1, measurement.responses));
      if (Math.abs(created - expected) > tolerance) {
        problems.push(
          `${row.id}: ${what}: ${(created * 100).toFixed(1)}% of the answers were 201, for ${(expected * 100).toFixed(1)}% POSTs`,
        );
      }
    };
    rounds.forEach((round, index) => check(round, `round ${index + 1}`));
    warmups.forEach((warmup, index) => check(warmup, `warm-up ${index + 1}`));
    if (writes && writes.errors > 0) problems.push(`${row.id}: ${writes.errors} errors while its writes were counted`);
  }
  if (memory.refusals === 0) problems.push('memory scenario: not one 401 or 429; the requests did not reach the service');
  if (memory.unexpected > 0) problems.push(`memory scenario: ${memory.unexpected} answers other than 401 or 429, or no answer`);
  if (redisKeys === 0) problems.push('no rate-limit keys in Redis: the Redis-store rows measured the memory fallback');
  for (const [name, code] of exitCodes) if (code !== 0) problems.push(`${name} exited with ${code}`);
  return problems;
}

/** URLs may carry credentials; they stay out of the results. */
const withoutUrls = (options: BenchOptions) => {
  const { postgresUrl, redisUrl, ...rest } = options;
  void postgresUrl;
  void redisUrl;
  return rest;
};

const commit = () => {
  try {
    return execFileSync('git', ['describe', '--always', '--dirty'], { cwd: ROOT, encoding: 'utf8' }).trim();
  } catch {
    return 'unknown';
  }
};

async function main(): Promise<number> {
  const options = parseOptions(process.argv.slice(2));
  const startedAt = new Date().toISOString();
  const loadAverageAtStart = loadavg()[0]!;
  mkdirSync(RESULTS_DIR, { recursive: true });
  await assertRedisUp(options.redisUrl);
  say(`building the service; seeding PostgreSQL database ${options.databaseName} and an embedded PGlite directory`);
  const pgliteDir = mkdtempSync(join(tmpdir(), 'pets-bench-pglite-'));
  // Independent and each mostly on one core: side by side they take the time of the slowest.
  const [postgres, pglite] = await Promise.all([
    createSeededPostgres(options.postgresUrl, options.databaseName),
    seedPglite(pgliteDir),
    buildService(),
  ]);
  // Where the traced server sends its spans: a sink that accepts every export, as a collector would.
  const otlpSink = createServer((request, response) => {
    request.resume();
    request.on('end', () => response.writeHead(200, { 'content-type': 'application/json' }).end('{}'));
  });
  await new Promise<void>((resolve) => otlpSink.listen(0, '127.0.0.1', resolve));
  const databases: Databases = {
    otlpEndpoint: `http://127.0.0.1:${(otlpSink.address() as { port: number }).port}`,
    postgresUrl: postgres.url,
    postgres: postgres.fixture,
    pgliteDir,
    pglite,
    redisUrl: options.redisUrl,
    // Unique per run: counters of earlier runs (or of other deployments) cannot leak in.
    redisKeyPrefix: `pets-bench:${Date.now()}-${randomBytes(4).toString('hex')}:`,
  };

  let servers = new Map<string, ServerProcess>();
  try {
    const specs = Object.values(serverSpecs(databases));
    servers = await startAll(specs);
    say(`servers up: ${[...servers.values()].map((server) => `${server.name} ${server.origin}`).join(', ')}`);
    await assertSamePages(databases, servers);
    const serversWhere = (test: (env: Record<string, string>) => boolean) =>
      new Set(specs.filter((spec) => spec.name!.startsWith('ours-') && test(spec.env!)).map((spec) => spec.name as ServerName));
    await assertLimits(
      databases,
      servers,
      serversWhere((env) => env.RATE_LIMIT_CONCURRENCY !== LIMITS_OFF.RATE_LIMIT_CONCURRENCY),
      options,
    );
    // The servers whose rows count their calls to Redis.
    const redisServers = serversWhere((env) => env.REDIS_URL !== '');
    const { reads, writes } = phases(databases, await etagsOf(databases, servers.get('ours-memory')!));
    const rows = [
      ...(await alternate(reads, servers, redisServers, options)),
      ...(await alternate(writes, servers, redisServers, options)),
    ];
    const redisKeys = await countKeys(options.redisUrl, databases.redisKeyPrefix);

    const exitCodes = new Map<string, number | null>();
    for (const server of servers.values()) exitCodes.set(server.name, await server.stop());
    servers = await startAll([oursSpec('ours-memory-soak', { DATABASE_URL: postgres.url })]);
    const memory = await measureMemory(servers.get('ours-memory-soak')!, options);
    for (const server of servers.values()) exitCodes.set(server.name, await server.stop());

    const run: RunResult = {
      startedAt,
      environment: {
        node: process.version,
        cpus: `${cpus().length} x ${cpus()[0]?.model ?? 'unknown CPU'}`,
        commit: commit(),
        loadAverage: { start: loadAverageAtStart, end: loadavg()[0]! },
      },
      options: withoutUrls(options),
      rows,
      writeCounts: {
        requests: options.straceRequests,
        connections: STRACE_CONNECTIONS,
        ...(straceUnavailable && { unavailable: straceUnavailable }),
      },
      memory,
      problems: findProblems(rows, options.connections, memory, exitCodes, redisKeys),
    };
    const summaries = summarize(rows);
    const goals = evaluateGoals(rows);
    const markdown = renderMarkdown(run, summaries, goals);
    writeFileSync(join(RESULTS_DIR, `${options.reportName}.md`), markdown);
    // Request shapes carry the run's API key, which belongs in no file, even for a database that is dropped.
    const withoutShapes = (key: string, value: unknown) => (key === 'shape' ? undefined : value);
    writeFileSync(
      join(RESULTS_DIR, `${options.reportName}.json`),
      `${JSON.stringify({ ...run, summaries, goals, concurrency: concurrencyCosts(rows) }, withoutShapes, 2)}\n`,
    );
    console.log(`\n${markdown}`);
    say(`written to bench/results/${options.reportName}.md and .json; server logs in bench/results/*.log`);
    for (const problem of run.problems) console.error(`[bench] PROBLEM: ${problem}`);
    return run.problems.length > 0 ? 1 : 0;
  } finally {
    await Promise.all([...servers.values()].map((server) => server.stop()));
    otlpSink.close();
    await postgres.drop();
    rmSync(pgliteDir, { recursive: true, force: true });
    await deleteKeys(options.redisUrl, databases.redisKeyPrefix);
  }
}

main().then(
  (code) => process.exit(code),
  (error: Error) => {
    console.error(`[bench] failed: ${error.stack ?? error.message}`);
    process.exit(1);
  },
);
