import type { BenchOptions } from './options.js';
import type { Measurement } from './load.js';
import { BARE_ROW, CREATE, LIST, rowId, SERVER_LABELS, type Row } from './scenarios.js';

/** One measurement, and what it cost the server process. */
export interface Round extends Measurement {
  /** CPU time of the server process (not of PostgreSQL or Redis) per response. */
  serverCpuUsPerResponse: number;
}

/** Every round of one row, measured and warm-up. */
export interface RowResult {
  row: Row;
  rounds: Round[];
  warmups: Measurement[];
}

/** RSS of the service before and after many requests with random, well-formed, invalid keys. */
export interface MemoryResult {
  requests: number;
  rssAfterWarmupBytes: number;
  rssAfterBytes: number;
  measured: Measurement;
  /** 401 (unknown key) and 429 (the address limited, then banned): the service working as designed. */
  refusals: number;
  /** Any other status, or no response at all. */
  unexpected: number;
}

export interface RunResult {
  startedAt: string;
  environment: {
    node: string;
    cpus: string;
    commit: string;
    /** One-minute load averages when the run started and ended: how much else the machine was doing. */
    loadAverage: { start: number; end: number };
  };
  options: Omit<BenchOptions, 'postgresUrl' | 'redisUrl'>;
  rows: RowResult[];
  memory: MemoryResult;
  /** Things that make the run invalid (the exit code is non-zero). */
  problems: string[];
}

export interface RowSummary {
  id: string;
  operation: string;
  server: string;
  requestsPerSecond: number;
  /** The slowest and fastest round, to show how noisy the machine was. */
  requestsPerSecondRange: [number, number];
  p50Ms: number;
  p99Ms: number;
  serverCpuUsPerResponse: number;
  /** Non-2xx responses and requests without a response, over every measured round. */
  errors: number;
  errorStatuses: Record<string, number>;
  warmupErrors: number;
  /** Medians of the per-round ratios: each round is compared with the same round of the baseline. */
  vsBare: number;
  vsDatabase: number;
  p99VsDatabase: number;
}

export interface Budget {
  name: string;
  target: string;
  measured: string;
  met: boolean;
}

export function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

const errorsOf = (measurement: Measurement) => measurement.non2xx + measurement.failed;

export function summarize(results: RowResult[]): RowSummary[] {
  const byId = new Map(results.map((result) => [result.row.id, result]));
  const perRoundRatio = (result: RowResult, baselineId: string, metric: (m: Measurement) => number) => {
    const baseline = byId.get(baselineId)!;
    return median(result.rounds.map((round, index) => metric(round) / metric(baseline.rounds[index]!)));
  };
  return results.map((result) => {
    const errorStatuses: Record<string, number> = {};
    for (const round of result.rounds) {
      for (const [status, count] of Object.entries(round.statuses)) {
        if (!status.startsWith('2')) errorStatuses[status] = (errorStatuses[status] ?? 0) + count;
      }
      if (round.failed) errorStatuses['no response'] = (errorStatuses['no response'] ?? 0) + round.failed;
    }
    return {
      id: result.row.id,
      operation: result.row.operation,
      server: SERVER_LABELS[result.row.server],
      requestsPerSecond: median(result.rounds.map((round) => round.requestsPerSecond)),
      requestsPerSecondRange: [
        Math.min(...result.rounds.map((round) => round.requestsPerSecond)),
        Math.max(...result.rounds.map((round) => round.requestsPerSecond)),
      ],
      p50Ms: median(result.rounds.map((round) => round.p50Ms)),
      p99Ms: median(result.rounds.map((round) => round.p99Ms)),
      serverCpuUsPerResponse: median(result.rounds.map((round) => round.serverCpuUsPerResponse)),
      errors: result.rounds.reduce((sum, round) => sum + errorsOf(round), 0),
      errorStatuses,
      warmupErrors: result.warmups.reduce((sum, round) => sum + errorsOf(round), 0),
      vsBare: perRoundRatio(result, BARE_ROW, (m) => m.requestsPerSecond),
      vsDatabase: perRoundRatio(result, result.row.databaseCeiling, (m) => m.requestsPerSecond),
      p99VsDatabase: perRoundRatio(result, result.row.databaseCeiling, (m) => m.p99Ms),
    };
  });
}

const ratio = (value: number) => `${value.toFixed(2)}x`;
const integer = (value: number) => Math.round(value).toLocaleString('en-US');
const ms = (value: number) => (value < 10 ? value.toFixed(2) : value.toFixed(1));
const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;

/** The issue's budgets, judged from this run's numbers only. */
export function evaluateBudgets(summaries: RowSummary[], memory: MemoryResult): Budget[] {
  const row = (server: 'ours-memory' | 'ours-redis' | 'ours-pglite', operation: string) =>
    summaries.find((summary) => summary.id === rowId(server, operation))!;
  const atLeast = (name: string, summary: RowSummary, minimum: number, ceiling: string): Budget => ({
    name,
    target: `>= ${ratio(minimum)} ${ceiling}`,
    measured: `${ratio(summary.vsDatabase)} (${integer(summary.requestsPerSecond)} req/s)`,
    met: summary.vsDatabase >= minimum,
  });
  const p99 = (name: string, summary: RowSummary, ceiling: string): Budget => ({
    name,
    target: `p99 <= 1.50x ${ceiling}'s`,
    measured: `${ratio(summary.p99VsDatabase)} (${ms(summary.p99Ms)} ms)`,
    met: summary.p99VsDatabase <= 1.5,
  });
  const pglite = row('ours-pglite', LIST);
  const growth = memory.rssAfterBytes / memory.rssAfterWarmupBytes;
  return [
    atLeast(`${LIST}, memory store`, row('ours-memory', LIST), 1.0, 'bare+pg'),
    atLeast(`${LIST}, Redis store`, row('ours-redis', LIST), 0.9, 'bare+pg'),
    atLeast(`${CREATE}, memory store`, row('ours-memory', CREATE), 0.9, 'bare+pg insert'),
    atLeast(`${CREATE}, Redis store`, row('ours-redis', CREATE), 0.9, 'bare+pg insert'),
    p99(`${LIST}, memory store, -c 50`, row('ours-memory', LIST), 'bare+pg'),
    p99(`${LIST}, Redis store, -c 50`, row('ours-redis', LIST), 'bare+pg'),
    p99(`${CREATE}, memory store, -c 50`, row('ours-memory', CREATE), 'bare+pg insert'),
    p99(`${CREATE}, Redis store, -c 50`, row('ours-redis', CREATE), 'bare+pg insert'),
    {
      name: `${LIST}, embedded PGlite`,
      target: '>= 1,000 req/s',
      measured: `${integer(pglite.requestsPerSecond)} req/s`,
      met: pglite.requestsPerSecond >= 1000,
    },
    {
      name: `RSS after ${integer(memory.requests)} random invalid keys`,
      target: '<= 1.50x RSS after warm-up',
      measured: `${ratio(growth)} (${mib(memory.rssAfterWarmupBytes)} -> ${mib(memory.rssAfterBytes)})`,
      met: growth <= 1.5,
    },
  ];
}

const table = (header: string[], rows: string[][]) =>
  [header, header.map(() => '---'), ...rows].map((cells) => `| ${cells.join(' | ')} |`).join('\n');

function errorCell(summary: RowSummary): string {
  if (summary.errors === 0) return '0';
  const detail = Object.entries(summary.errorStatuses).map(([status, count]) => `${status}: ${integer(count)}`);
  return `**${integer(summary.errors)}** (${detail.join(', ')})`;
}

export function renderMarkdown(run: RunResult, summaries: RowSummary[], budgets: Budget[]): string {
  const { options, memory } = run;
  const statuses = Object.entries(memory.measured.statuses)
    .map(([status, count]) => `${status}: ${integer(count)}`)
    .join(', ');
  const warmupErrors = summaries.filter((summary) => summary.warmupErrors > 0);
  const lines = [
    options.smoke ? '# Benchmark smoke run (not a measurement)' : '# Benchmark results',
    '',
    `${run.startedAt}, commit ${run.environment.commit}, Node ${run.environment.node}, ${run.environment.cpus}. ` +
      `autocannon -c ${options.connections}, ${options.durationSeconds} s per measurement after a ${options.warmupSeconds} s warm-up, ` +
      `${options.rounds} round${options.rounds === 1 ? '' : 's'}; each figure is the median over the rounds (req/s also gives the slowest and fastest), ` +
      'each ratio the median of the per-round ratios. ' +
      `Load average (1 min) at the start ${run.environment.loadAverage.start.toFixed(1)}, at the end ${run.environment.loadAverage.end.toFixed(1)}.`,
    '',
    '## Throughput and latency',
    '',
    table(
      ['Operation', 'Server', 'req/s', 'p50 ms', 'p99 ms', 'errors', 'CPU µs/req', 'x bare', 'x bare+pg', 'p99 x bare+pg'],
      summaries.map((summary) => [
        summary.operation,
        summary.server,
        options.rounds > 1
          ? `${integer(summary.requestsPerSecond)} (${summary.requestsPerSecondRange.map(integer).join('-')})`
          : integer(summary.requestsPerSecond),
        ms(summary.p50Ms),
        ms(summary.p99Ms),
        errorCell(summary),
        integer(summary.serverCpuUsPerResponse),
        ratio(summary.vsBare),
        ratio(summary.vsDatabase),
        ratio(summary.p99VsDatabase),
      ]),
    ),
    '',
    'The bare+pg columns of POST rows compare with the bare+pg INSERT route; all other rows with the bare+pg list query. ' +
      'CPU µs/req is the CPU time (user and system) of the server process alone per response, from /proc: ' +
      'unlike req/s it hardly moves when other processes compete for the cores, and it leaves out PostgreSQL and Redis.',
    ...(warmupErrors.length > 0
      ? ['', `Errors during warm-ups (not in the table): ${warmupErrors.map((s) => `${s.id}: ${integer(s.warmupErrors)}`).join('; ')}.`]
      : []),
    '',
    '## Budgets',
    '',
    ...(options.rounds < 3 ? [`Only ${options.rounds} round(s): indicative, the budgets are defined on at least 3.`, ''] : []),
    table(
      ['Budget', 'Target', 'Measured', 'Result'],
      budgets.map((budget) => [budget.name, budget.target, budget.measured, budget.met ? 'met' : '**missed**']),
    ),
    '',
    '## Memory under random invalid keys',
    '',
    `A fresh instance (memory store) took a ${options.warmupSeconds} s warm-up, then ${integer(memory.requests)} requests to ` +
      `\`${LIST}\`, each with a random well-formed key (\`psk_\` + 43 base64url characters), at ${integer(memory.measured.requestsPerSecond)} req/s. ` +
      `RSS after the warm-up: ${mib(memory.rssAfterWarmupBytes)}; after the requests: ${mib(memory.rssAfterBytes)}.`,
    '',
    `Responses: ${statuses || 'none'}; no response: ${integer(memory.measured.failed)}. ` +
      '401 (unknown key) and 429 (the per-address limiter, after 60 a minute, then its ban) are the service working as designed, ' +
      `so they are counted here (${integer(memory.refusals)}) and not as errors; anything else would be (${integer(memory.unexpected)}).`,
    '',
    '## How it was measured',
    '',
    '- Every server is a child process of its own; autocannon runs in the harness process. All share the machine, ' +
      'PostgreSQL and Redis, and are measured in turn, round after round, so they share the noise.',
    '- bare: Fastify returning 20 fixed pets. bare+pg: Fastify running the service\'s list (and INSERT) SQL through a plain `pg` Pool ' +
      'of 10 connections. Both run with NODE_ENV=production and an info logger, but log no line per request: they are ceilings.',
    '- ours: the compiled service (`node dist/server.js`), NODE_ENV=production, LOG_LEVEL=info to a log file, with an enterprise key ' +
      'whose limits the run cannot reach, so every request is authenticated, rate limited and logged. Nothing is switched off.',
    '- One PostgreSQL database seeded by the project\'s migrations with 10,000 pets (half available); reads are measured before any ' +
      'POST grows the table. PGlite: the same seed in an embedded data directory.',
    '- Errors are non-2xx responses and requests without a response, summed over the measured rounds.',
    '',
  ];
  return lines.join('\n');
}
