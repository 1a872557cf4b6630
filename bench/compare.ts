/**
 * `npm run bench:compare -- --before DIR`: this build against the build of another commit (DIR: a
 * checkout of it with `npm ci && npm run build` done, e.g. a `git worktree`), on one seeded
 * PostgreSQL, with the memory store and with Redis. The four workloads of `npm run bench`, the hot
 * page revalidated (304) and traced (sampled at 5%, always on), each measured on both builds in
 * turn, the order swapped every round (A B, B A, ...), to bench/results/compare.md: req/s and CPU
 * time per request (from /proc, hardly moved by other load on the machine), as ratios of this build
 * to the other, round by round, and the writes per response. A row the other build cannot run
 * (no ETag, no tracing) is shown as new. Both builds run with issue #38's limits off (oursSpec's
 * LIMITS_OFF; a build before them ignores those settings), so this measures the path they leave
 * when off; what concurrency limits cost when on is measured by `npm run bench`, side by side with
 * them off in one build, where a build before them would have nothing to set.
 */
import { createServer } from 'node:http';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createSeededPostgres } from './fixtures.js';
import { load, type Measurement, type RequestShape } from './load.js';
import { parseOptions, type BenchOptions } from './options.js';
import { buildService, watchSteal } from './processes.js';
import { median, percent, stealNote } from './report.js';
import { operations, oursSpec, revalidating, TRACING_SAMPLE_RATIO } from './scenarios.js';
import { countWrites, perResponse } from './syscalls.js';
import { ROOT, startServer, type ServerProcess, type ServerSpec } from '../harness/processes.js';
import { assertRedisUp } from '../harness/redis.js';

const RESULTS_DIR = join(ROOT, 'bench/results');
const BUILDS = ['now', 'before'] as const;
type Build = (typeof BUILDS)[number];
/** Each build runs one instance of each: the two stores, and the memory store with tracing sampled or always on. */
const INSTANCES = ['memory', 'redis', 'sampled', 'traced'] as const;
type Instance = (typeof INSTANCES)[number];
/** Connections while strace counts writes, as in `npm run bench`. */
const STRACE_CONNECTIONS = 10;

/** A line of the comparison: one workload on one instance of each build. */
interface CompareRow {
  workload: string;
  instance: Instance;
  /** Each build's requests: a revalidation carries the ETag that build gave. */
  shapes: Partial<Record<Build, RequestShape>>;
  /** Answered 304 (not a 2xx) when the page is unchanged. */
  revalidates?: boolean;
  /** Why the other build has no figures for this row: it predates what the row measures. */
  newBecause?: string;
}

interface Sample {
  requestsPerSecond: number;
  cpuMicrosecondsPerRequest: number;
  p99Ms: number;
  errors: number;
  /** The machine's CPU time the hypervisor gave to other guests during the measurement (0 to 1). */
  stealShare: number;
}

interface Writes {
  socket: number;
  log: number;
}

const started = Date.now();
const say = (message: string) => console.log(`[bench:compare ${((Date.now() - started) / 1000).toFixed(1)}s] ${message}`);

const isExpected = (row: CompareRow, status: number | string) =>
  row.revalidates ? String(status) === '304' : String(status).startsWith('2');
const errorsOf = (row: CompareRow, measured: Measurement) =>
  Object.entries(measured.statuses).reduce((sum, [status, count]) => (isExpected(row, status) ? sum : sum + count), measured.failed);

async function main() {
  const options = parseOptions(process.argv.slice(2));
  if (!options.before) throw new Error('--before DIR is required: a checkout of the other commit, built');
  const before = options.before;
  await buildService();
  await assertRedisUp(options.redisUrl);
  const postgres = await createSeededPostgres(options.postgresUrl, `${options.databaseName}_compare`);
  // Where the traced instances send their spans: a sink that accepts every export, as in `npm run bench`.
  const otlpSink = createServer((request, response) => {
    request.resume();
    request.on('end', () => response.writeHead(200, { 'content-type': 'application/json' }).end('{}'));
  });
  await new Promise<void>((resolve) => otlpSink.listen(0, '127.0.0.1', resolve));
  const otlpEndpoint = `http://127.0.0.1:${(otlpSink.address() as { port: number }).port}`;
  const servers = new Map<string, ServerProcess>();
  /** Instances of the other build that could not start, and why: their rows are new. */
  const missing = new Map<Instance, string>();
  try {
    const tracing = { DATABASE_URL: postgres.url, OTEL_EXPORTER_OTLP_ENDPOINT: otlpEndpoint };
    const specs: Record<Instance, ServerSpec> = {
      memory: oursSpec('memory', { DATABASE_URL: postgres.url }),
      redis: oursSpec('redis', { DATABASE_URL: postgres.url, REDIS_URL: options.redisUrl }),
      sampled: oursSpec('sampled', {
        ...tracing,
        OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
        OTEL_TRACES_SAMPLER_ARG: String(TRACING_SAMPLE_RATIO),
      }),
      traced: oursSpec('traced', { ...tracing, OTEL_TRACES_SAMPLER: 'always_on' }),
    };
    for (const build of BUILDS) {
      for (const instance of INSTANCES) {
        const spec = specs[instance];
        const nodeArgs = build === 'before' ? [join(before, 'dist/server.js')] : spec.nodeArgs;
        const starting = startServer({ ...spec, name: `${build}-${instance}`, nodeArgs, logDir: RESULTS_DIR });
        // Both stores are the comparison itself; a tracing instance the other build cannot run makes its rows new.
        if (build === 'before' && (instance === 'sampled' || instance === 'traced')) {
          try {
            servers.set(`${build}-${instance}`, await starting);
          } catch (error) {
            missing.set(instance, `it did not start: ${(error as Error).message.split('; its output:')[0]}`);
          }
        } else servers.set(`${build}-${instance}`, await starting);
      }
    }
    const ops = operations(postgres.fixture);
    const both = (shape: RequestShape) => ({ now: shape, before: shape });
    const etags = Object.fromEntries(
      await Promise.all(BUILDS.map(async (build) => [build, await etagOf(servers.get(`${build}-memory`)!, ops.list)] as const)),
    );
    const revalidation: CompareRow = {
      workload: 'hot, revalidated (304)',
      instance: 'memory',
      revalidates: true,
      shapes: Object.fromEntries(BUILDS.flatMap((build) => (etags[build] ? [[build, revalidating(ops.list, etags[build])]] : []))),
    };
    if (!etags.now) throw new Error('this build answered the hot page without an ETag');
    if (!etags.before) revalidation.newBecause = 'it answers the hot page without an ETag';
    const reads: CompareRow[] = [
      ...(['memory', 'redis'] as const).flatMap((instance) => [
        { workload: 'hot', instance, shapes: both(ops.list) },
        { workload: 'walk', instance, shapes: both(ops.walk) },
      ]),
      revalidation,
      ...(['sampled', 'traced'] as const).map((instance) => ({
        workload: 'hot',
        instance,
        shapes: missing.has(instance) ? { now: ops.list } : both(ops.list),
        ...(missing.has(instance) && { newBecause: missing.get(instance) }),
      })),
    ];
    const writes: CompareRow[] = (['memory', 'redis'] as const).flatMap((instance) => [
      { workload: 'write', instance, shapes: both(ops.create) },
      { workload: 'mixed', instance, shapes: both(ops.mixed) },
    ]);
    const samples = new Map<CompareRow, Partial<Record<Build, Sample[]>>>();
    const writeCounts = new Map<CompareRow, Partial<Record<Build, Writes>>>();
    let straceUnavailable: string | undefined;
    // Reads first: the writes grow the table, so every read round sees the same data.
    for (const phase of [reads, writes]) {
      for (let round = 0; round < options.rounds; round++) {
        const order = round % 2 === 0 ? BUILDS : [...BUILDS].reverse();
        for (const row of phase) {
          for (const build of order) {
            const shape = row.shapes[build];
            if (!shape) continue;
            const server = servers.get(`${build}-${row.instance}`)!;
            const sample = await measure(row, server, shape, options);
            say(
              `round ${round + 1} ${row.workload} ${row.instance} ${build}: ${Math.round(sample.requestsPerSecond)} req/s, ` +
                `${Math.round(sample.cpuMicrosecondsPerRequest)} µs CPU/request, ${sample.errors} errors, steal ${Math.round(sample.stealShare * 100)}%`,
            );
            const bySide = samples.get(row) ?? {};
            samples.set(row, { ...bySide, [build]: [...(bySide[build] ?? []), sample] });
          }
        }
      }
      for (const row of phase) {
        for (const build of BUILDS) {
          const shape = row.shapes[build];
          if (!shape || options.straceRequests === 0 || straceUnavailable) continue;
          const server = servers.get(`${build}-${row.instance}`)!;
          try {
            const counted = await countWrites(server, async () => {
              const measured = await load(server.origin, shape, STRACE_CONNECTIONS, { requests: options.straceRequests });
              return measured.responses;
            });
            writeCounts.set(row, {
              ...writeCounts.get(row),
              [build]: { socket: perResponse(counted, 'client'), log: perResponse(counted, 'log') },
            });
          } catch (error) {
            server.assertRunning();
            straceUnavailable = (error as Error).message;
            say(`writes not counted: ${straceUnavailable}`);
          }
        }
      }
    }
    const markdown = render([...reads, ...writes], samples, writeCounts, before, options, straceUnavailable);
    writeFileSync(join(RESULTS_DIR, options.smoke ? 'compare-smoke.md' : 'compare.md'), markdown);
    console.log(markdown);
  } finally {
    await Promise.all([...servers.values()].map((server) => server.stop()));
    otlpSink.close();
    await postgres.drop();
  }
}

/** The ETag a client reading the page holds, or undefined from a build that sets none. */
async function etagOf(server: ServerProcess, request: { path: string; headers: Record<string, string> }): Promise<string | undefined> {
  const response = await fetch(server.origin + request.path, { headers: request.headers });
  await response.arrayBuffer();
  if (response.status !== 200) throw new Error(`${server.name}: GET ${request.path} got ${response.status}`);
  return response.headers.get('etag') ?? undefined;
}

async function measure(row: CompareRow, server: ServerProcess, shape: RequestShape, options: BenchOptions): Promise<Sample> {
  await load(server.origin, shape, options.connections, { seconds: options.warmupSeconds });
  const cpuBefore = server.cpuSeconds();
  const stolen = watchSteal();
  const measured = await load(server.origin, shape, options.connections, { seconds: options.durationSeconds });
  server.assertRunning();
  return {
    requestsPerSecond: measured.requestsPerSecond,
    cpuMicrosecondsPerRequest: ((server.cpuSeconds() - cpuBefore) * 1e6) / Math.max(1, measured.responses),
    p99Ms: measured.p99Ms,
    errors: errorsOf(row, measured),
    stealShare: stolen(),
  };
}

const INSTANCE_LABELS: Record<Instance, string> = {
  memory: 'memory',
  redis: 'redis',
  sampled: `memory, traced ${TRACING_SAMPLE_RATIO * 100}%`,
  traced: 'memory, traced always',
};

function render(
  rows: CompareRow[],
  samples: Map<CompareRow, Partial<Record<Build, Sample[]>>>,
  writeCounts: Map<CompareRow, Partial<Record<Build, Writes>>>,
  before: string,
  options: BenchOptions,
  straceUnavailable: string | undefined,
): string {
  const fixed = (value: number, digits = 2) => value.toFixed(digits);
  const lines = [
    '# This build against another',
    '',
    `${new Date().toISOString()}: this checkout against the build in \`${before}\`, ${options.rounds} rounds of ${options.durationSeconds} s ` +
      `(after ${options.warmupSeconds} s of warm-up) per workload, store and build, autocannon -c ${options.connections}, ` +
      'the order of the two builds swapped every round. Ratios are this build over the other, the median of the per-round ratios: ' +
      'req/s above 1 is faster, CPU per request below 1 is cheaper. A row the other build cannot run is marked new.',
    '',
    '| workload | store | req/s now | req/s before | req/s ratio | CPU µs/req now | before | CPU ratio | p99 ms now / before | ' +
      'socket writes/resp now / before | log writes/resp now / before | errors | steal %, most in a round |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  const notes: string[] = [];
  for (const row of rows) {
    const now = samples.get(row)?.now ?? [];
    const then = samples.get(row)?.before;
    if (now.length === 0) continue;
    const middle = (build: Sample[] | undefined, metric: (sample: Sample) => number) =>
      build ? String(Math.round(median(build.map(metric)))) : '-';
    const ratio = (metric: (sample: Sample) => number) =>
      then ? fixed(median(now.map((sample, round) => metric(sample) / metric(then[round]!)))) : 'new';
    const writes = writeCounts.get(row);
    const writesCell = (kind: keyof Writes) =>
      writes?.now ? `${fixed(writes.now[kind])} / ${writes.before ? fixed(writes.before[kind]) : '-'}` : '-';
    const p99 = (build: Sample[] | undefined) => (build ? String(median(build.map((s) => s.p99Ms))) : '-');
    lines.push(
      `| ${row.workload} | ${INSTANCE_LABELS[row.instance]} | ${middle(now, (s) => s.requestsPerSecond)} | ${middle(then, (s) => s.requestsPerSecond)} | ` +
        `${ratio((s) => s.requestsPerSecond)} | ${middle(now, (s) => s.cpuMicrosecondsPerRequest)} | ` +
        `${middle(then, (s) => s.cpuMicrosecondsPerRequest)} | ${ratio((s) => s.cpuMicrosecondsPerRequest)} | ` +
        `${p99(now)} / ${p99(then)} | ${writesCell('socket')} | ${writesCell('log')} | ` +
        `${[...now, ...(then ?? [])].reduce((sum, s) => sum + s.errors, 0)} | ${percent(Math.max(...[...now, ...(then ?? [])].map((s) => s.stealShare)))} |`,
    );
    if (row.newBecause)
      notes.push(`- ${row.workload}, ${INSTANCE_LABELS[row.instance]}: new, the other build cannot run it (${row.newBecause}).`);
  }
  lines.push(
    '',
    straceUnavailable
      ? `Writes were not counted: ${straceUnavailable}.`
      : options.straceRequests === 0
        ? 'Writes were not counted (`--strace-requests 0`).'
        : `Writes/resp: after each phase's rounds, ${options.straceRequests} requests of the row at -c ${STRACE_CONNECTIONS} per build with strace ` +
          "attached (as in `npm run bench`): write system calls per response on the clients' sockets and on the log file.",
    '',
    stealNote([...samples.values()].flatMap((bySide) => [...(bySide.now ?? []), ...(bySide.before ?? [])].map((s) => s.stealShare))),
    ...(notes.length > 0 ? ['', ...notes] : []),
  );
  return `${lines.join('\n')}\n`;
}

main().catch((error: Error) => {
  console.error(`[bench:compare] failed: ${error.stack ?? error.message}`);
  process.exit(1);
});
