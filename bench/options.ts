import { parseArgs } from 'node:util';

/** Everything a benchmark run can be told; flags win over environment variables, which win over defaults. */
export interface BenchOptions {
  /** A few-second end-to-end check of every scenario (CI), not a measurement. */
  smoke: boolean;
  connections: number;
  durationSeconds: number;
  warmupSeconds: number;
  /** How many times each group of servers is measured in turn (A B A B ...); medians are taken over these. */
  rounds: number;
  /** Requests with random invalid keys in the memory scenario. */
  memoryRequests: number;
  /** Requests per row while strace counts the server's write system calls; 0 counts none. */
  straceRequests: number;
  /** A PostgreSQL URL with the right to create and drop the benchmark database. */
  postgresUrl: string;
  /** Dropped and recreated on every run. */
  databaseName: string;
  redisUrl: string;
  /** bench:compare: a checkout of another commit, built, to measure this build against. */
  before?: string;
  /** latest.md/.json for measurements, smoke.md/.json for smoke runs, so a smoke run never overwrites results. */
  reportName: string;
}

const USAGE = `usage: npm run bench -- [--smoke] [--connections N] [--duration SECONDS] [--warmup SECONDS]
                        [--rounds N] [--memory-requests N] [--strace-requests N]
       npm run bench:compare -- --before DIR [the options above]
environment: BENCH_SMOKE=1, BENCH_CONNECTIONS, BENCH_DURATION, BENCH_WARMUP, BENCH_ROUNDS, BENCH_MEMORY_REQUESTS,
             BENCH_STRACE_REQUESTS, BENCH_POSTGRES_URL, BENCH_DATABASE, BENCH_REDIS_URL`;

// 32 rows x 3 rounds x (8 + 2) s, a write count per row (about 1 s each) and the memory scenario: about 17 minutes on 2 cores.
const MEASURED = { durationSeconds: 8, warmupSeconds: 2, rounds: 3, memoryRequests: 200_000, straceRequests: 1_000 };
// Long enough for every server to answer a few hundred requests at least, short enough for CI.
const SMOKE = { durationSeconds: 0.5, warmupSeconds: 0.2, rounds: 1, memoryRequests: 2_000, straceRequests: 200 };

export function parseOptions(argv: string[], env: NodeJS.ProcessEnv = process.env): BenchOptions {
  const { values } = parseArgs({
    args: argv,
    options: {
      smoke: { type: 'boolean' },
      connections: { type: 'string' },
      duration: { type: 'string' },
      warmup: { type: 'string' },
      rounds: { type: 'string' },
      'memory-requests': { type: 'string' },
      'strace-requests': { type: 'string' },
      before: { type: 'string' },
      help: { type: 'boolean' },
    },
    strict: true,
  });
  if (values.help) {
    console.log(USAGE);
    process.exit(0);
  }
  const smoke = values.smoke ?? ['1', 'true'].includes(env.BENCH_SMOKE ?? '');
  const defaults = smoke ? SMOKE : MEASURED;
  const number = (name: string, flag: string | undefined, envValue: string | undefined, fallback: number, integer = true, zero = false) => {
    const raw = flag ?? envValue;
    if (raw === undefined || raw === '') return fallback;
    const value = Number(raw);
    if (!(value > 0 || (zero && value === 0)) || (integer && !Number.isInteger(value)))
      throw new Error(`${name} must be a ${zero ? 'non-negative' : 'positive'} ${integer ? 'integer' : 'number'}, got ${raw}\n${USAGE}`);
    return value;
  };
  const databaseName = env.BENCH_DATABASE || (smoke ? 'pets_bench_smoke' : 'pets_bench');
  // It is interpolated into CREATE/DROP DATABASE, which take no parameters.
  if (!/^[a-z_][a-z0-9_]*$/.test(databaseName)) throw new Error(`BENCH_DATABASE must be a lower-case SQL identifier, got ${databaseName}`);
  return {
    smoke,
    connections: number('--connections', values.connections, env.BENCH_CONNECTIONS, 50),
    durationSeconds: number('--duration', values.duration, env.BENCH_DURATION, defaults.durationSeconds, false),
    warmupSeconds: number('--warmup', values.warmup, env.BENCH_WARMUP, defaults.warmupSeconds, false),
    rounds: number('--rounds', values.rounds, env.BENCH_ROUNDS, defaults.rounds),
    memoryRequests: number('--memory-requests', values['memory-requests'], env.BENCH_MEMORY_REQUESTS, defaults.memoryRequests),
    straceRequests: number('--strace-requests', values['strace-requests'], env.BENCH_STRACE_REQUESTS, defaults.straceRequests, true, true),
    postgresUrl: env.BENCH_POSTGRES_URL || 'postgres://postgres@127.0.0.1:5432/postgres',
    databaseName,
    redisUrl: env.BENCH_REDIS_URL || 'redis://127.0.0.1:6379',
    ...(values.before && { before: values.before }),
    reportName: smoke ? 'smoke' : 'latest',
  };
}
