/**
 * `npm run bench:compare -- --before DIR`: this build against the build of another commit (DIR: a
 * checkout of it with `npm ci && npm run build` done, e.g. a `git worktree`), on one seeded
 * PostgreSQL, with the memory store and with Redis. The four workloads of `npm run bench`, each
 * measured on both builds in turn, the order swapped every round (A B, B A, ...), to
 * bench/results/compare.md: req/s and CPU time per request (from /proc, hardly moved by other load
 * on the machine), as ratios of this build to the other, round by round.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createSeededPostgres } from './fixtures.js';
import { load, type RequestShape } from './load.js';
import { parseOptions } from './options.js';
import { buildService } from './processes.js';
import { median } from './report.js';
import { operations, oursSpec, WORKLOADS, type Workload } from './scenarios.js';
import { ROOT, startServer, type ServerProcess } from '../test/support/processes.js';
import { assertRedisUp } from '../test/support/redis.js';

const RESULTS_DIR = join(ROOT, 'bench/results');
const BUILDS = ['now', 'before'] as const;
const STORES = ['memory', 'redis'] as const;
type Build = (typeof BUILDS)[number];

interface Sample {
  requestsPerSecond: number;
  cpuMicrosecondsPerRequest: number;
  p99Ms: number;
  errors: number;
}

const started = Date.now();
const say = (message: string) => console.log(`[bench:compare ${((Date.now() - started) / 1000).toFixed(1)}s] ${message}`);

async function main() {
  const options = parseOptions(process.argv.slice(2));
  if (!options.before) throw new Error('--before DIR is required: a checkout of the other commit, built');
  const before = options.before;
  await buildService();
  await assertRedisUp(options.redisUrl);
  const postgres = await createSeededPostgres(options.postgresUrl, `${options.databaseName}_compare`);
  const servers = new Map<string, ServerProcess>();
  try {
    for (const build of BUILDS) {
      for (const store of STORES) {
        const name = `${build}-${store}`;
        const spec = oursSpec(name, { DATABASE_URL: postgres.url, ...(store === 'redis' && { REDIS_URL: options.redisUrl }) });
        const nodeArgs = build === 'before' ? [join(before, 'dist/server.js')] : spec.nodeArgs;
        servers.set(name, await startServer({ ...spec, nodeArgs, logDir: RESULTS_DIR }));
      }
    }
    const ops = operations(postgres.fixture);
    const shapes: Record<Workload, RequestShape> = { hot: ops.list, walk: ops.walk, write: ops.create, mixed: ops.mixed };
    const samples = new Map<string, Sample[]>();
    // Reads first: the writes grow the table, so every read round sees the same data.
    for (const phase of [
      ['hot', 'walk'],
      ['write', 'mixed'],
    ] as Array<Workload[]>) {
      for (let round = 0; round < options.rounds; round++) {
        const order = round % 2 === 0 ? BUILDS : [...BUILDS].reverse();
        for (const workload of phase) {
          for (const store of STORES) {
            for (const build of order) {
              const server = servers.get(`${build}-${store}`)!;
              await load(server.origin, shapes[workload], options.connections, { seconds: options.warmupSeconds });
              const cpuBefore = server.cpuSeconds();
              const measured = await load(server.origin, shapes[workload], options.connections, { seconds: options.durationSeconds });
              server.assertRunning();
              const sample = {
                requestsPerSecond: measured.requestsPerSecond,
                cpuMicrosecondsPerRequest: ((server.cpuSeconds() - cpuBefore) * 1e6) / Math.max(1, measured.responses),
                p99Ms: measured.p99Ms,
                errors: measured.non2xx + measured.failed,
              };
              say(
                `round ${round + 1} ${workload} ${store} ${build}: ${Math.round(sample.requestsPerSecond)} req/s, ${Math.round(sample.cpuMicrosecondsPerRequest)} µs CPU/request`,
              );
              const key = `${workload} ${store} ${build}`;
              samples.set(key, [...(samples.get(key) ?? []), sample]);
            }
          }
        }
      }
    }
    const markdown = render(samples, before, options);
    writeFileSync(join(RESULTS_DIR, options.smoke ? 'compare-smoke.md' : 'compare.md'), markdown);
    console.log(markdown);
  } finally {
    await Promise.all([...servers.values()].map((server) => server.stop()));
    await postgres.drop();
  }
}

function render(samples: Map<string, Sample[]>, before: string, options: ReturnType<typeof parseOptions>): string {
  const fixed = (value: number, digits = 2) => value.toFixed(digits);
  const lines = [
    '# This build against another',
    '',
    `${new Date().toISOString()}: this checkout against the build in \`${before}\`, ${options.rounds} rounds of ${options.durationSeconds} s ` +
      `(after ${options.warmupSeconds} s of warm-up) per workload, store and build, autocannon -c ${options.connections}, ` +
      'the order of the two builds swapped every round. Ratios are this build over the other, the median of the per-round ratios: ' +
      'req/s above 1 is faster, CPU per request below 1 is cheaper.',
    '',
    '| workload | store | req/s now | req/s before | req/s ratio | CPU µs/req now | before | CPU ratio | p99 ms now / before | errors |',
    '|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const workload of Object.keys(WORKLOADS) as Workload[]) {
    for (const store of STORES) {
      const of = (build: Build) => samples.get(`${workload} ${store} ${build}`) ?? [];
      const now = of('now');
      const then = of('before');
      if (now.length === 0) continue;
      const ratio = (metric: (sample: Sample) => number) => median(now.map((sample, round) => metric(sample) / metric(then[round]!)));
      const middle = (build: Sample[], metric: (sample: Sample) => number) => median(build.map(metric));
      lines.push(
        `| ${workload} | ${store} | ${Math.round(middle(now, (s) => s.requestsPerSecond))} | ${Math.round(middle(then, (s) => s.requestsPerSecond))} | ` +
          `${fixed(ratio((s) => s.requestsPerSecond))} | ${Math.round(middle(now, (s) => s.cpuMicrosecondsPerRequest))} | ` +
          `${Math.round(middle(then, (s) => s.cpuMicrosecondsPerRequest))} | ${fixed(ratio((s) => s.cpuMicrosecondsPerRequest))} | ` +
          `${middle(now, (s) => s.p99Ms)} / ${middle(then, (s) => s.p99Ms)} | ${[...now, ...then].reduce((sum, s) => sum + s.errors, 0)} |`,
      );
    }
  }
  return `${lines.join('\n')}\n`;
}

main().catch((error: Error) => {
  console.error(`[bench:compare] failed: ${error.stack ?? error.message}`);
  process.exit(1);
});
