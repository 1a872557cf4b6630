import type { BenchOptions } from './options.js';
import type { Measurement } from './load.js';
import { perResponse, WRITE_TARGETS, type WriteCount, type WriteTarget } from './syscalls.js';
import {
  BARE_ROW,
  CONCURRENCY_PAIRS,
  DB_LIST_ROW,
  DEFAULT_CONCURRENCY,
  isExpected,
  LIST,
  LIST_THREE_WINDOWS,
  REVALIDATED_PAGES,
  revalidationOf,
  rowId,
  SERVER_LABELS,
  TRACING_SAMPLE_RATIO,
  TRACING_SETS,
  USAGE_RECORDING,
  WORKLOAD_ROWS,
  WORKLOADS,
  type Row,
  type ServerName,
  type Workload,
} from './scenarios.js';

/** One measurement, and what it cost the server process. */
export interface Round extends Measurement {
  /** CPU time of the server process (not of PostgreSQL or Redis) per response. */
  serverCpuUsPerResponse: number;
  /**
   * The part of it the kernel spent on the process's system calls, the socket write above all:
   * it moves with how the load generator on the other core is woken, not with the server's code.
   */
  serverSystemCpuUsPerResponse: number;
  /** The machine's CPU time the hypervisor gave to other guests during the measurement (0 to 1, from /proc/stat). */
  stealShare: number;
  /** A Redis store's calls to Redis per response (INFO commandstats): script calls (EVALSHA, EVAL) and releases sent alone (ZREM). */
  redisCallsPerResponse?: RedisCalls;
}

/** Calls to Redis per response, from INFO commandstats. */
export interface RedisCalls {
  scripts: number;
  releases: number;
}

/** Every round of one row, measured and warm-up. */
export interface RowResult {
  row: Row;
  rounds: Round[];
  warmups: Measurement[];
  /** The write system calls of its server over a fixed number of its requests, counted by strace after the rounds. */
  writes?: WriteCount & { errors: number };
}

/** RSS of the service before and after many requests with random, well-formed, invalid keys. */
export interface MemoryResult {
  requests: number;
  connections: number;
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
  /** How the writes were counted, or why they were not. */
  writeCounts: { requests: number; connections: number; unavailable?: string };
  memory: MemoryResult;
  /** Things that make the run invalid (the exit code is non-zero). */
  problems: string[];
}

export interface RowSummary {
  id: string;
  operation: string;
  server: string;
  workload?: Workload;
  requestsPerSecond: number;
  /** The slowest and fastest round, to show how noisy the machine was. */
  requestsPerSecondRange: [number, number];
  p50Ms: number;
  p99Ms: number;
  serverCpuUsPerResponse: number;
  serverSystemCpuUsPerResponse: number;
  stealShare: number;
  /** Non-2xx responses and requests without a response, over every measured round. */
  errors: number;
  errorStatuses: Record<string, number>;
  warmupErrors: number;
  /** Medians of the per-round ratios: each round is compared with the same round of the baseline. */
  vsBare: number;
  vsDatabase: number;
  p99VsDatabase: number;
  /** Write system calls per response, by where they went, when they were counted. */
  writesPerResponse?: Record<WriteTarget, number>;
  /** The client socket's write system calls per response, by call (write, writev, ...). */
  clientWritesPerResponseByCall?: Record<string, number>;
  /** A Redis store's calls to Redis per response, each the median over the rounds. */
  redisCallsPerResponse?: RedisCalls;
}

/** One of the issue's goals, judged from this run's numbers only. */
export interface Goal {
  name: string;
  target: string;
  measured: string;
  /** How far the measurement is on the met side of the target (negative: missed by). */
  margin: string;
  met: boolean;
}

export function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

/** Answers other than the row expects, and requests without an answer. */
export const errorsOf = (row: Row, measurement: Measurement) =>
  Object.entries(measurement.statuses).reduce((sum, [status, count]) => (isExpected(row, status) ? sum : sum + count), measurement.failed);

function writesSummary(writes: WriteCount): Pick<RowSummary, 'writesPerResponse' | 'clientWritesPerResponseByCall'> {
  return {
    writesPerResponse: Object.fromEntries(WRITE_TARGETS.map((target) => [target, perResponse(writes, target)])) as Record<
      WriteTarget,
      number
    >,
    clientWritesPerResponseByCall: Object.fromEntries(
      Object.entries(writes.clientByCall).map(([call, count]) => [call, count / Math.max(1, writes.responses)]),
    ),
  };
}

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
        if (!isExpected(result.row, status)) errorStatuses[status] = (errorStatuses[status] ?? 0) + count;
      }
      if (round.failed) errorStatuses['no response'] = (errorStatuses['no response'] ?? 0) + round.failed;
    }
    return {
      id: result.row.id,
      operation: result.row.operation,
      server: SERVER_LABELS[result.row.server],
      ...(result.row.workload && { workload: result.row.workload }),
      requestsPerSecond: median(result.rounds.map((round) => round.requestsPerSecond)),
      requestsPerSecondRange: [
        Math.min(...result.rounds.map((round) => round.requestsPerSecond)),
        Math.max(...result.rounds.map((round) => round.requestsPerSecond)),
      ],
      p50Ms: median(result.rounds.map((round) => round.p50Ms)),
      p99Ms: median(result.rounds.map((round) => round.p99Ms)),
      serverCpuUsPerResponse: median(result.rounds.map((round) => round.serverCpuUsPerResponse)),
      serverSystemCpuUsPerResponse: median(result.rounds.map((round) => round.serverSystemCpuUsPerResponse)),
      stealShare: median(result.rounds.map((round) => round.stealShare)),
      errors: result.rounds.reduce((sum, round) => sum + errorsOf(result.row, round), 0),
      errorStatuses,
      warmupErrors: result.warmups.reduce((sum, round) => sum + errorsOf(result.row, round), 0),
      vsBare: perRoundRatio(result, BARE_ROW, (m) => m.requestsPerSecond),
      vsDatabase: perRoundRatio(result, result.row.databaseCeiling, (m) => m.requestsPerSecond),
      p99VsDatabase: perRoundRatio(result, result.row.databaseCeiling, (m) => m.p99Ms),
      ...(result.writes && writesSummary(result.writes)),
      ...(result.rounds[0]?.redisCallsPerResponse && {
        redisCallsPerResponse: {
          scripts: median(result.rounds.map((round) => round.redisCallsPerResponse!.scripts)),
          releases: median(result.rounds.map((round) => round.redisCallsPerResponse!.releases)),
        },
      }),
    };
  });
}

const ratio = (value: number) => `${value.toFixed(2)}x`;
const integer = (value: number) => Math.round(value).toLocaleString('en-US');
const ms = (value: number) => (value < 10 ? value.toFixed(2) : value.toFixed(1));
const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;

const STORES = { 'ours-memory': 'memory store', 'ours-redis': 'Redis store' } as const;
type Store = keyof typeof STORES;

/** Ours's row of a workload with one store, and bare+pg's row of the same workload. */
function workloadRows(summaries: RowSummary[], workload: Workload, store: Store): { ours: RowSummary; baseline: RowSummary } {
  const find = (id: string) => summaries.find((summary) => summary.id === id)!;
  return { ours: find(rowId(store, WORKLOAD_ROWS[workload].ours)), baseline: find(WORKLOAD_ROWS[workload].baseline) };
}

const STORE_SERVERS = Object.keys(STORES) as Store[];

/** What a goal's ratio is of: a higher req/s is better, a lower CPU per request or p99 is. */
const GOAL_METRICS = {
  'req/s': { of: (round: Round) => round.requestsPerSecond, unit: 'req/s', atLeast: true, value: integer },
  'CPU µs/req': { of: (round: Round) => round.serverCpuUsPerResponse, unit: 'µs', atLeast: false, value: integer },
  p99: { of: (round: Round) => round.p99Ms, unit: 'ms', atLeast: false, value: ms },
  // Script calls and releases together; NaN (not measured) on a row without Redis.
  'Redis calls/req': {
    of: (round: Round) => (round.redisCallsPerResponse ? round.redisCallsPerResponse.scripts + round.redisCallsPerResponse.releases : NaN),
    unit: 'calls per request',
    atLeast: false,
    value: (value: number) => value.toFixed(2),
  },
} as const;

/**
 * A goal: one row's metric over another's, taken round by round, at least (req/s) or at most (CPU,
 * p99) the target; or, without a baseline, the row's own figure (its median over the rounds).
 */
export interface GoalSpec {
  name: string;
  row: string;
  baseline?: string;
  /** How the target names the baseline: bare, bare+pg, tracing off. */
  baselineName?: string;
  metric: keyof typeof GOAL_METRICS;
  target: number;
}

const HOT_MEMORY = rowId('ours-memory', LIST);
/** A goal on req/s: `row` at least `target` times `baseline`'s. */
const reqsGoal = (name: string, row: string, baseline: string, baselineName: string, target: number): GoalSpec => ({
  name,
  row,
  baseline,
  baselineName,
  metric: 'req/s',
  target,
});

const workloadGoal = (workload: Workload, store: Store, target: number): GoalSpec =>
  reqsGoal(
    `${workload}, ${STORES[store]}: req/s`,
    rowId(store, WORKLOAD_ROWS[workload].ours),
    WORKLOAD_ROWS[workload].baseline,
    'bare+pg',
    target,
  );

const HOT_REDIS_DEFAULTS = rowId('ours-redis-concurrency', LIST);
const [MEMORY_TRACING, REDIS_TRACING] = TRACING_SETS;

/**
 * Issue #46's targets (the production default, the Redis store with concurrency limits on, against
 * the same with them off, the memory store and bare+pg; its calls to Redis; what tracing costs it).
 */
export const PRODUCTION_DEFAULT_GOALS: GoalSpec[] = [
  reqsGoal('hot page, Redis store, defaults: req/s', HOT_REDIS_DEFAULTS, rowId('ours-redis', LIST), 'concurrency limits off', 0.9),
  {
    name: 'hot page, Redis store, defaults: CPU per request',
    row: HOT_REDIS_DEFAULTS,
    baseline: rowId('ours-redis', LIST),
    baselineName: 'concurrency limits off',
    metric: 'CPU µs/req',
    target: 1.15,
  },
  reqsGoal(
    'hot page, Redis store, defaults: req/s against the memory store',
    HOT_REDIS_DEFAULTS,
    rowId('ours-memory-concurrency', LIST),
    'memory store, defaults',
    0.85,
  ),
  { name: 'hot page, Redis store, defaults: Redis calls per request', row: HOT_REDIS_DEFAULTS, metric: 'Redis calls/req', target: 1.2 },
  reqsGoal('hot page, Redis store, defaults: req/s against bare+pg', HOT_REDIS_DEFAULTS, DB_LIST_ROW, 'bare+pg', 2.0),
  reqsGoal(
    `hot page, Redis store, defaults, tracing sampled at ${TRACING_SAMPLE_RATIO * 100}%: req/s`,
    rowId(REDIS_TRACING.sampled, LIST),
    rowId(REDIS_TRACING.off, LIST),
    'tracing off',
    0.9,
  ),
  reqsGoal(
    'hot page, Redis store, defaults, every request traced: req/s',
    rowId(REDIS_TRACING.traced, LIST),
    rowId(REDIS_TRACING.off, LIST),
    'tracing off',
    0.6,
  ),
];

/**
 * Issue #46's targets, then #36's (cost per request: the hot page against bare Fastify, tracing
 * against tracing off), then the earlier goals against bare+pg that still hold where neither sets one.
 */
export const GOALS: GoalSpec[] = [
  ...PRODUCTION_DEFAULT_GOALS,
  reqsGoal('hot page, memory store: req/s', HOT_MEMORY, BARE_ROW, 'bare', 0.6),
  {
    name: 'hot page, memory store: CPU per request',
    row: HOT_MEMORY,
    baseline: BARE_ROW,
    baselineName: "bare's",
    metric: 'CPU µs/req',
    target: 2.0,
  },
  reqsGoal('hot page, Redis store: req/s', rowId('ours-redis', LIST), BARE_ROW, 'bare', 0.55),
  reqsGoal('304 revalidation of the hot page, memory store: req/s', rowId('ours-memory', revalidationOf(LIST)), BARE_ROW, 'bare', 0.7),
  workloadGoal('walk', 'ours-memory', 1.6),
  workloadGoal('mixed', 'ours-memory', 2.2),
  reqsGoal(
    `hot page, tracing sampled at ${TRACING_SAMPLE_RATIO * 100}%: req/s`,
    rowId(MEMORY_TRACING.sampled, LIST),
    HOT_MEMORY,
    'tracing off',
    0.9,
  ),
  reqsGoal('hot page, every request traced: req/s', rowId(MEMORY_TRACING.traced, LIST), HOT_MEMORY, 'tracing off', 0.6),
  ...STORE_SERVERS.map((store): GoalSpec => ({
    name: `hot page, ${STORES[store]}: CPU per request with three windows`,
    row: rowId(store, LIST_THREE_WINDOWS),
    baseline: rowId(store, LIST),
    baselineName: 'two windows',
    metric: 'CPU µs/req',
    target: 1.05,
  })),
  {
    name: 'hot page, Redis store, three windows: Redis calls per request',
    row: rowId('ours-redis', LIST_THREE_WINDOWS),
    metric: 'Redis calls/req',
    target: 1.05,
  },
  workloadGoal('hot', 'ours-memory', 2.0),
  workloadGoal('hot', 'ours-redis', 1.5),
  workloadGoal('walk', 'ours-redis', 1.0),
  workloadGoal('write', 'ours-memory', 1.0),
  workloadGoal('write', 'ours-redis', 1.0),
  workloadGoal('mixed', 'ours-redis', 1.5),
  {
    name: 'hot page, memory store: CPU per request with the usage record',
    row: rowId(USAGE_RECORDING.on, LIST),
    baseline: rowId(USAGE_RECORDING.off, LIST),
    baselineName: 'no usage record',
    metric: 'CPU µs/req',
    target: 1.05,
  },
  // At the run's connections, a p99 no worse than bare+pg's on any workload with either store.
  ...(Object.keys(WORKLOADS) as Workload[]).flatMap((workload) =>
    STORE_SERVERS.map((store): GoalSpec => ({
      name: `${workload}, ${STORES[store]}: p99`,
      row: rowId(store, WORKLOAD_ROWS[workload].ours),
      baseline: WORKLOAD_ROWS[workload].baseline,
      baselineName: "bare+pg's",
      metric: 'p99',
      target: 1.0,
    })),
  ),
];

const signed = (value: number, digits: number) => `${value >= 0 ? '+' : '-'}${Math.abs(value).toFixed(digits)}`;

/** The goals, each ratio the median of the per-round ratios, so both sides of it share each round's noise. Reported, never asserted. */
export function evaluateGoals(results: RowResult[]): Goal[] {
  const byId = new Map(results.map((result) => [result.row.id, result]));
  return GOALS.map((goal): Goal => {
    const metric = GOAL_METRICS[goal.metric];
    const row = byId.get(goal.row)!;
    const middle = (result: RowResult) => metric.value(median(result.rounds.map(metric.of)));
    const sign = metric.atLeast ? '>=' : '<=';
    if (goal.baseline === undefined) {
      const measured = median(row.rounds.map(metric.of));
      const margin = metric.atLeast ? measured - goal.target : goal.target - measured;
      if (Number.isNaN(measured))
        return { name: goal.name, target: `${sign} ${metric.value(goal.target)}`, measured: 'not measured', margin: '-', met: false };
      return {
        name: goal.name,
        target: `${sign} ${metric.value(goal.target)} ${metric.unit}`,
        measured: `${metric.value(measured)} ${metric.unit}`,
        margin: `${signed(margin, 2)} (${signed((margin / goal.target) * 100, 0)}%)`,
        met: margin >= 0,
      };
    }
    const baseline = byId.get(goal.baseline)!;
    const measured = median(row.rounds.map((round, index) => metric.of(round) / metric.of(baseline.rounds[index]!)));
    // Positive on the met side, in ratio points and in percent of the target.
    const margin = metric.atLeast ? measured - goal.target : goal.target - measured;
    return {
      name: goal.name,
      target: `${sign} ${ratio(goal.target)} ${goal.baselineName}`,
      measured: `${ratio(measured)} (${middle(row)} vs ${middle(baseline)} ${metric.unit})`,
      margin: `${signed(margin, 2)}x (${signed((margin / goal.target) * 100, 0)}%)`,
      met: margin >= 0,
    };
  });
}

const table = (header: string[], rows: string[][]) =>
  [header, header.map(() => '---'), ...rows].map((cells) => `| ${cells.join(' | ')} |`).join('\n');

const writesCell = (summary: RowSummary, target: WriteTarget) =>
  summary.writesPerResponse ? summary.writesPerResponse[target].toFixed(2) : '-';

/** How the write columns were counted, and what a response's writes were made with. */
function writesNote(run: RunResult): string {
  const { requests, connections, unavailable } = run.writeCounts;
  if (requests === 0) return 'Writes were not counted (`--strace-requests 0`).';
  if (unavailable) return `Writes were not counted: ${unavailable}.`;
  const calls = new Set(run.rows.flatMap((result) => Object.keys(result.writes?.clientByCall ?? {})));
  return (
    `Writes/resp: after its rounds, each row's requests once more, ${integer(requests)} of them at -c ${connections}, with ` +
    '`strace -f -yy -e trace=write,writev,sendmsg,sendto` attached to its server: the write system calls per response on the ' +
    "connections clients opened (socket: 1.00 is headers and body in one call) and on the server's log file (log: below 1.00 " +
    "when lines gather while a write is under way; strace slows the server, so the pace differs from the rounds'). " +
    `System calls seen on the sockets: ${[...calls].sort().join(', ') || 'none'}. ` +
    'Writes to PostgreSQL, Redis and the OTLP sink, and the rest (thread-pool wake-ups), are in the JSON. ' +
    'bare and bare+pg log no line per request.'
  );
}

/** The hot page with tracing off, sampled and always on, per store, beside bare, each ratio taken round by round. */
function tracingTable(results: RowResult[]): string {
  const byId = new Map(results.map((result) => [result.row.id, result]));
  const bare = byId.get(BARE_ROW)!;
  const perRound = (result: RowResult, baseline: RowResult, metric: (round: Round) => number) =>
    median(result.rounds.map((round, index) => metric(round) / metric(baseline.rounds[index]!)));
  const rps = (round: Round) => round.requestsPerSecond;
  const cpu = (round: Round) => round.serverCpuUsPerResponse;
  return table(
    ['Store', 'Tracing', 'req/s', 'CPU µs/req', 'req/s x tracing off', 'CPU x tracing off', 'req/s x bare', 'CPU x bare'],
    TRACING_SETS.flatMap((set) => {
      const off = byId.get(rowId(set.off, LIST))!;
      const settings: Array<[string, RowResult]> = [
        ['off', off],
        [`sampled at ${TRACING_SAMPLE_RATIO * 100}% (\`parentbased_traceidratio\`)`, byId.get(rowId(set.sampled, LIST))!],
        ['every request (`always_on`)', byId.get(rowId(set.traced, LIST))!],
      ];
      return settings.map(([setting, result]) => [
        set.store,
        setting,
        integer(median(result.rounds.map(rps))),
        integer(median(result.rounds.map(cpu))),
        ratio(perRound(result, off, rps)),
        ratio(perRound(result, off, cpu)),
        ratio(perRound(result, bare, rps)),
        ratio(perRound(result, bare, cpu)),
      ]);
    }),
  );
}

/** Every row of a Redis store: its calls to Redis per response, medians over the rounds. */
function redisCallsTable(summaries: RowSummary[]): string {
  const counted = summaries.filter((summary) => summary.redisCallsPerResponse);
  const calls = (value: number) => value.toFixed(2);
  return table(
    ['Operation', 'Server', 'script calls/req (EVALSHA, EVAL)', 'releases/req (ZREM)', 'calls/req'],
    counted.map(({ operation, server, redisCallsPerResponse: { scripts, releases } = { scripts: 0, releases: 0 } }) => [
      operation,
      server,
      calls(scripts),
      calls(releases),
      calls(scripts + releases),
    ]),
  );
}

/** What concurrency limits cost one store on the hot page, from rows measured in the same rounds. */
export interface ConcurrencyCost {
  store: string;
  /** The servers measured: limits off, and on. */
  servers: { off: ServerName; on: ServerName };
  /** Medians over the rounds, with the limits off (RATE_LIMIT_CONCURRENCY=off) and on (the default limits). */
  off: { requestsPerSecond: number; serverCpuUsPerResponse: number; p99Ms: number };
  on: { requestsPerSecond: number; serverCpuUsPerResponse: number; p99Ms: number };
  /** On over off, the median of the per-round ratios: req/s below 1 and CPU per request above 1 are what the limits cost. */
  requestsPerSecondRatio: number;
  cpuRatio: number;
}

/** The hot page with concurrency limits off and on, per store, each ratio taken round by round. */
export function concurrencyCosts(results: RowResult[]): ConcurrencyCost[] {
  const byId = new Map(results.map((result) => [result.row.id, result]));
  const rps = (round: Round) => round.requestsPerSecond;
  const cpu = (round: Round) => round.serverCpuUsPerResponse;
  const middle = (result: RowResult) => ({
    requestsPerSecond: median(result.rounds.map(rps)),
    serverCpuUsPerResponse: median(result.rounds.map(cpu)),
    p99Ms: median(result.rounds.map((round) => round.p99Ms)),
  });
  return CONCURRENCY_PAIRS.map(({ store, off: offServer, on: onServer }) => {
    const off = byId.get(rowId(offServer, LIST))!;
    const on = byId.get(rowId(onServer, LIST))!;
    const perRound = (metric: (round: Round) => number) =>
      median(on.rounds.map((round, index) => metric(round) / metric(off.rounds[index]!)));
    return {
      store,
      servers: { off: offServer, on: onServer },
      off: middle(off),
      on: middle(on),
      requestsPerSecondRatio: perRound(rps),
      cpuRatio: perRound(cpu),
    };
  });
}

function concurrencyTable(costs: ConcurrencyCost[]): string {
  const cells = (side: ConcurrencyCost['off']) => [integer(side.requestsPerSecond), integer(side.serverCpuUsPerResponse), ms(side.p99Ms)];
  return table(
    ['Store', 'Concurrency limits', 'req/s', 'CPU µs/req', 'p99 ms', 'req/s x off', 'CPU x off'],
    costs.flatMap((cost) => [
      [cost.store, 'off (`RATE_LIMIT_CONCURRENCY=off`)', ...cells(cost.off), ratio(1), ratio(1)],
      [cost.store, 'on (the default limits)', ...cells(cost.on), ratio(cost.requestsPerSecondRatio), ratio(cost.cpuRatio)],
    ]),
  );
}

/** The section's one-line answer: what the limits cost each store, as ratios of on to off. */
export function concurrencyLine(costs: ConcurrencyCost[]): string {
  const redis = costs.find((cost) => cost.servers.on === 'ours-redis-concurrency');
  const others = costs.filter((cost) => cost !== redis);
  const said = (cost: ConcurrencyCost) =>
    `${ratio(cost.requestsPerSecondRatio)} the req/s and ${ratio(cost.cpuRatio)} the CPU per request of the same store with them off`;
  return [
    ...(redis ? [`**With Redis, concurrency limits on serve the hot page at ${said(redis)}.**`] : []),
    ...others.map((cost) => `With the ${cost.store}: ${said(cost)}.`),
  ].join(' ');
}

function errorCell(summary: RowSummary): string {
  if (summary.errors === 0) return '0';
  const detail = Object.entries(summary.errorStatuses).map(([status, count]) => `${status}: ${integer(count)}`);
  return `**${integer(summary.errors)}** (${detail.join(', ')})`;
}

/** Per workload: ours / bare+pg in req/s with each store, and the p99s side by side. */
function workloadTable(summaries: RowSummary[]): string {
  return table(
    ['Workload', 'ours (memory) / bare+pg', 'ours (Redis) / bare+pg', 'p99 ours vs bare+pg'],
    (Object.keys(WORKLOADS) as Workload[]).map((workload) => {
      const memory = workloadRows(summaries, workload, 'ours-memory');
      const redis = workloadRows(summaries, workload, 'ours-redis');
      const cell = ({ ours, baseline }: { ours: RowSummary; baseline: RowSummary }) =>
        `${ratio(ours.vsDatabase)} (${integer(ours.requestsPerSecond)} / ${integer(baseline.requestsPerSecond)} req/s)`;
      return [
        workload,
        cell(memory),
        cell(redis),
        `memory ${ms(memory.ours.p99Ms)} ms, Redis ${ms(redis.ours.p99Ms)} ms vs bare+pg ${ms(memory.baseline.p99Ms)} ms`,
      ];
    }),
  );
}

/**
 * Each revalidated page, fresh (200) and revalidated (304), per store: req/s and CPU per request
 * side by side, and the ratios taken round by round, as every ratio of the report.
 */
function revalidationTable(results: RowResult[]): string {
  const byId = new Map(results.map((result) => [result.row.id, result]));
  const perRound = (revalidated: RowResult, fresh: RowResult, metric: (round: Round) => number) =>
    median(revalidated.rounds.map((round, index) => metric(round) / metric(fresh.rounds[index]!)));
  return table(
    ['Page', 'Store', '200: req/s, CPU µs/req', '304: req/s, CPU µs/req', '304 / 200 req/s', '304 / 200 CPU'],
    REVALIDATED_PAGES.flatMap((page) =>
      (Object.keys(STORES) as Store[]).map((store) => {
        const fresh = byId.get(rowId(store, page))!;
        const revalidated = byId.get(rowId(store, revalidationOf(page)))!;
        const cell = (result: RowResult) =>
          `${integer(median(result.rounds.map((round) => round.requestsPerSecond)))}, ${integer(median(result.rounds.map((round) => round.serverCpuUsPerResponse)))}`;
        return [
          `\`${page}\``,
          STORES[store],
          cell(fresh),
          cell(revalidated),
          ratio(perRound(revalidated, fresh, (round) => round.requestsPerSecond)),
          ratio(perRound(revalidated, fresh, (round) => round.serverCpuUsPerResponse)),
        ];
      }),
    ),
  );
}

export function renderMarkdown(run: RunResult, summaries: RowSummary[], goals: Goal[]): string {
  const { options, memory } = run;
  const statuses = Object.entries(memory.measured.statuses)
    .map(([status, count]) => `${status}: ${integer(count)}`)
    .join(', ');
  const warmupErrors = summaries.filter((summary) => summary.warmupErrors > 0);
  const missed = goals.filter((goal) => !goal.met);
  const lines = [
    options.smoke ? '# Benchmark smoke run (not a measurement)' : '# Benchmark results',
    '',
    `${run.startedAt}, commit ${run.environment.commit}, Node ${run.environment.node}, ${run.environment.cpus}. ` +
      `autocannon -c ${options.connections}, ${options.durationSeconds} s per measurement after a ${options.warmupSeconds} s warm-up, ` +
      `${options.rounds} round${options.rounds === 1 ? '' : 's'}; each figure is the median over the rounds (req/s also gives the slowest and fastest), ` +
      'each ratio the median of the per-round ratios. ' +
      `Load average (1 min) at the start ${run.environment.loadAverage.start.toFixed(1)}, at the end ${run.environment.loadAverage.end.toFixed(1)}.`,
    '',
    stealNote(run.rows.flatMap((row) => row.rounds.map((round) => round.stealShare))),
    '',
    '## Workloads: ours against bare+pg',
    '',
    workloadTable(summaries),
    '',
    ...(Object.entries(WORKLOADS) as Array<[Workload, (typeof WORKLOADS)[Workload]]>).map(
      ([workload, { ours, baseline }]) => `- **${workload}**: ours ${ours}; bare+pg ${baseline}.`,
    ),
    '',
    'Each ratio is req/s of ours over req/s of bare+pg on the same workload, taken round by round (the median of those ratios; ' +
      'the req/s beside it are the medians of each side). p99s are medians over the rounds.',
    '',
    '## Goals',
    '',
    ...(options.rounds < 3 ? [`Only ${options.rounds} round(s): indicative, the goals are defined on at least 3.`, ''] : []),
    table(
      ['Goal', 'Target', 'Measured', 'Margin', 'Result'],
      goals.map((goal) => [goal.name, goal.target, goal.measured, goal.margin, goal.met ? 'met' : '**missed**']),
    ),
    '',
    `${goals.length - missed.length} of ${goals.length} goals met. ` +
      `The first ${PRODUCTION_DEFAULT_GOALS.length} are issue #46's targets (the production default, the Redis store with concurrency limits on: ` +
      'against the same with them off, the memory store with the same defaults and bare+pg; its calls to Redis per request, ' +
      'the one goal that is a figure, not a ratio; tracing against tracing off). ' +
      "The next eight are issue #36's (cost per request: the hot page against bare Fastify, tracing against tracing off, " +
      'walk and mixed with the memory store against bare+pg); the others, against bare+pg, are the earlier goals #36 leaves in place, ' +
      "but for issue #48's: the hot page's CPU per request with the usage record (every server of ours keeps one) against without it. " +
      'Margin: how far the measurement lies on the met side of the target (negative: missed by), in ratio points and in percent of the target. ' +
      'Every ratio is taken round by round (the median of the per-round ratios), so both of its sides share the noise of each round: ' +
      'it may differ from the ratio of the two medians beside it. ' +
      `The p99 goals are at -c ${options.connections}, the p99 of ours over bare+pg's. ` +
      'The benchmark reports the goals; it never fails on a missed one.',
    '',
    '## Throughput and latency, every row',
    '',
    table(
      [
        'Operation',
        'Server',
        'req/s',
        'p50 ms',
        'p99 ms',
        'errors',
        'CPU µs/req',
        'of it system µs/req',
        'steal %',
        'socket writes/resp',
        'log writes/resp',
        'x bare',
        'x bare+pg',
        'p99 x bare+pg',
      ],
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
        integer(summary.serverSystemCpuUsPerResponse),
        percent(summary.stealShare),
        writesCell(summary, 'client'),
        writesCell(summary, 'log'),
        ratio(summary.vsBare),
        ratio(summary.vsDatabase),
        ratio(summary.p99VsDatabase),
      ]),
    ),
    '',
    "The bare+pg columns of a workload's rows compare with bare+pg's route for the same workload; the other rows (the deep page, " +
      'by id, PGlite) with the bare+pg hot list query. ' +
      'CPU µs/req is the CPU time (user and system) of the server process alone per response, from /proc: ' +
      'unlike req/s it hardly moves when other processes compete for the cores (it does when the hypervisor gives them to another ' +
      'guest: steal %), and it leaves out PostgreSQL and Redis. ' +
      "Of it, system is the kernel's part, spent on the process's system calls (the socket write above all): one write of the same size " +
      'costs more when it wakes a load generator that was asleep, so this part grows as req/s falls, whatever the code. ' +
      writesNote(run),
    ...(warmupErrors.length > 0
      ? ['', `Errors during warm-ups (not in the table): ${warmupErrors.map((s) => `${s.id}: ${integer(s.warmupErrors)}`).join('; ')}.`]
      : []),
    '',
    '## Revalidation: 304 against 200',
    '',
    revalidationTable(run.rows),
    '',
    'The same page, asked for as a new client asks (200 with the body) and as a client that holds it asks, with `If-None-Match` ' +
      'set to its ETag (304, no body). Both are authenticated, rate limited and logged, and read the page from the cache; the 304 ' +
      'is then taken back from the rate-limit windows. Above 1.00x in req/s, or below it in CPU, the revalidation is the cheaper.',
    '',
    '## Tracing: off, sampled, every request',
    '',
    tracingTable(run.rows),
    '',
    `\`${LIST}\` on ours with the memory store and with the Redis store with its defaults (concurrency limits on), measured in the ` +
      'same rounds as bare: tracing off (no OpenTelemetry loaded), ' +
      `and with \`OTEL_EXPORTER_OTLP_ENDPOINT\` set to the benchmark's own OTLP/HTTP sink (it answers every export 200), ` +
      `sampled at ${TRACING_SAMPLE_RATIO * 100}% (\`OTEL_TRACES_SAMPLER=parentbased_traceidratio\`, \`OTEL_TRACES_SAMPLER_ARG=${TRACING_SAMPLE_RATIO}\`; ` +
      'no request carries a `traceparent`, so each is a root the ratio decides) and with every request traced (`OTEL_TRACES_SAMPLER=always_on`). ' +
      'A sampled request exports its server span and, beneath it, its queries and Redis commands.',
    '',
    '## Concurrency limits: off and on',
    '',
    concurrencyTable(concurrencyCosts(run.rows)),
    '',
    concurrencyLine(concurrencyCosts(run.rows)),
    '',
    `\`${LIST}\` on ours with each store, measured in the same rounds: concurrency limits off, as on every other row of ours, ` +
      `and on with the default limits per plan (\`RATE_LIMIT_CONCURRENCY=${DEFAULT_CONCURRENCY}\`: the enterprise key may have 100 requests ` +
      `in flight; the run holds ${options.connections}, so none is refused). On, each request takes a slot as it is decided: with Redis a ` +
      "lease in a sorted set, taken by the same script call that decides the windows, and given back by the key's next decision or, " +
      "failing one, by a ZREM at the end of the event loop's turn for all the leases given back in it; with the memory store a " +
      'set in the process. Ratios are on over off, the median of the per-round ratios: req/s below 1.00x and CPU above 1.00x are the cost.',
    '',
    '## Calls to Redis per request',
    '',
    redisCallsTable(summaries),
    '',
    'Every row of a Redis store: the calls Redis counted in `INFO commandstats` over each measured round (taken before and after it; ' +
      'only the measured server is under load), per response, the median over the rounds. Script calls are `EVALSHA` and `EVAL` (the ' +
      "rate limiter's decisions, and its refunds of a 304's cost), releases the `ZREM`s that gave back leases no decision carried " +
      "(the script expires the leases a decision carries rather than ZREMing them, so a script's own commands are not counted as releases). " +
      "Other commands are left out: `ZADD` also counts the script's writes and the leases' renewals.",
    '',
    '## Memory under random invalid keys',
    '',
    `A fresh instance (memory store) took a ${options.warmupSeconds} s warm-up, then ${integer(memory.requests)} requests over ${integer(memory.connections)} connections to ` +
      `\`${LIST}\`, each with a random well-formed key (\`psk_\` + 43 base64url characters), at ${integer(memory.measured.requestsPerSecond)} req/s. ` +
      `RSS after the warm-up: ${mib(memory.rssAfterWarmupBytes)}; after the requests: ${mib(memory.rssAfterBytes)} ` +
      `(${ratio(memory.rssAfterBytes / memory.rssAfterWarmupBytes)}).`,
    '',
    `Responses: ${statuses || 'none'}; no response: ${integer(memory.measured.failed)}. ` +
      '401 (unknown key) and 429 (the per-address limiter, after 60 a minute, then its ban) are the service working as designed, ' +
      `so they are counted here (${integer(memory.refusals)}) and not as errors; anything else would be (${integer(memory.unexpected)}).`,
    '',
    '## How it was measured',
    '',
    '- Every server is a child process of its own; autocannon runs in the harness process. All share the machine, ' +
      'PostgreSQL and Redis, and are measured in turn, round after round, so they share the noise.',
    "- bare: Fastify returning 20 fixed pets. bare+pg: Fastify running the service's list, unfiltered list and INSERT SQL through a plain `pg` Pool " +
      'of 10 connections, with no validation, auth, rate limit or cache. Both run with NODE_ENV=production and an info logger, but log no line per request: they are ceilings.',
    '- ours: the compiled service (`node dist/server.js`), NODE_ENV=production, LOG_LEVEL=info to a log file, with an enterprise key ' +
      'whose limits the run cannot reach, so every request is authenticated, rate limited and logged. The limits of issue #38 are off ' +
      '(`RATE_LIMIT_CONCURRENCY=off`; shadow mode, operation costs and usage webhooks are off by default, their settings left empty), ' +
      'as before them, but on the rows that measure concurrency limits; each server is checked to answer `GET /v1/rate_limit` with the ' +
      'concurrency limit and the costs it should have before any load. Every server of ours keeps the usage record (issue #48: counted ' +
      'in memory, written once a second), but `ours-unrecorded` (`USAGE_RETENTION_DAYS=0`), measured on the hot page beside `ours-memory`.',
    "- One PostgreSQL database seeded by the project's migrations with 10,000 pets (half available). Reads (hot, walk and the other " +
      'GETs) are measured first, all their rounds, then the writes (write and mixed), which grow the table: every read round sees the same data. ' +
      'PGlite: the same seed in an embedded data directory.',
    '- Before any load, ours (each store) and bare+pg are checked to answer the hot page and several walk pages with the same pets.',
    "- Every INSERT statement, bare+pg's too, fires the schema's trigger that sends one PostgreSQL notice per statement " +
      '(migrations/004, how instances learn of new pets): PostgreSQL serialises the commits of transactions that notify, so ' +
      "bare+pg's one INSERT per request pays that for every pet, while the service's batched creates pay it once per batch.",
    '- Errors are non-2xx responses and requests without a response, summed over the measured rounds; any error makes the run exit 1.',
    '',
  ];
  return lines.join('\n');
}

export const percent = (share: number) => `${Math.round(share * 100)}%`;

/** What the hypervisor took from the machine while it was measured. */
export function stealNote(stealShares: number[]): string {
  if (stealShares.length === 0) return 'Steal time: nothing measured.';
  return (
    `Steal time: the hypervisor gave ${percent(median(stealShares))} of this machine's CPU time to other guests during the median ` +
    `measurement, ${percent(Math.max(...stealShares))} during the worst (steal % per row: the median over its rounds). ` +
    'A neighbour slows every server at once, CPU per request included (a shared core runs slower), so a ratio taken within one ' +
    'round stays fair where a figure compared across rounds or runs does not.'
  );
}
