/**
 * `npm run bench:windows`: what a third window costs the hot page (issue 56's goal: at most 1.05x
 * the CPU per request of two, with one Redis call). One server per store, the same hot page asked
 * with a key of two windows (a minute, a day) and one of three (a second besides), alternated
 * within each round and the order swapped every round, so that neither the machine's drift nor a
 * JIT still warming up falls on one side. The whole bench (`npm run bench`) measures the same rows
 * once among thirty others; this one measures only them, long enough to tell 5% apart.
 * Writes bench/results/windows.md.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { ROOT, startServer, type ServerProcess } from '../harness/processes.js';
import { createSeededPostgres } from './fixtures.js';
import { load } from './load.js';
import { buildService } from './processes.js';
import { LIST_PATH, oursSpec } from './scenarios.js';

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '7' },
    duration: { type: 'string', default: '6' },
    warmup: { type: 'string', default: '2' },
    connections: { type: 'string', default: '50' },
  },
});
const ROUNDS = Number(values.rounds);
const [DURATION, WARMUP, CONNECTIONS] = [Number(values.duration), Number(values.warmup), Number(values.connections)];
const POSTGRES = process.env.BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const REDIS = process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';

/** Server CPU per response, in µs, of the hot page asked with this key after a warm-up. */
async function cpuPerResponse(server: ServerProcess, key: string): Promise<number> {
  const request = { method: 'GET' as const, path: LIST_PATH, headers: { authorization: `Bearer ${key}` } };
  await load(server.origin, request, CONNECTIONS, { seconds: WARMUP });
  const before = server.cpuSeconds();
  const measured = await load(server.origin, request, CONNECTIONS, { seconds: DURATION });
  if (measured.non2xx + measured.failed > 0)
    throw new Error(`${server.name}: ${JSON.stringify(measured.statuses)}, ${measured.failed} failed`);
  return ((server.cpuSeconds() - before) * 1e6) / measured.responses;
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

await buildService();
const database = await createSeededPostgres(POSTGRES, 'pets_bench_windows');
const servers: ServerProcess[] = [];
try {
  const prefix = `pets-bench-windows:${Date.now()}:`;
  for (const spec of [
    oursSpec('ours-memory', { DATABASE_URL: database.url }),
    oursSpec('ours-redis', { DATABASE_URL: database.url, REDIS_URL: REDIS, REDIS_KEY_PREFIX: prefix }),
  ]) {
    servers.push(await startServer({ ...spec, logDir: join(ROOT, 'bench/results') }));
  }
  const lines: string[] = [];
  for (const server of servers) {
    const ratios: number[] = [];
    const two: number[] = [];
    const three: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const keys = [database.fixture.apiKey, database.fixture.threeWindowsKey];
      const [first, second] = round % 2 === 0 ? keys : keys.reverse();
      const measured = new Map([
        [first!, await cpuPerResponse(server, first!)],
        [second!, await cpuPerResponse(server, second!)],
      ]);
      two.push(measured.get(database.fixture.apiKey)!);
      three.push(measured.get(database.fixture.threeWindowsKey)!);
      ratios.push(three.at(-1)! / two.at(-1)!);
      console.log(
        `[bench:windows] ${server.name} round ${round + 1}: two ${two.at(-1)!.toFixed(1)} µs, three ${three.at(-1)!.toFixed(1)} µs`,
      );
    }
    const sorted = [...ratios].sort((a, b) => a - b);
    lines.push(
      `| ${server.name} | ${median(two).toFixed(1)} | ${median(three).toFixed(1)} | ${median(ratios).toFixed(3)}x | ${sorted[0]!.toFixed(3)}-${sorted.at(-1)!.toFixed(3)} |`,
    );
  }
  const report = [
    '# Three windows against two',
    '',
    `\`npm run bench:windows\`: the hot page (\`${LIST_PATH}\`), ${ROUNDS} rounds of ${DURATION} s (after ${WARMUP} s of warm-up) per key and store, ` +
      `autocannon -c ${CONNECTIONS}, a key of two windows (a minute, a day) and one of three (a second besides) alternated, their order swapped every round. ` +
      'The goal (issue 56): three windows at most 1.05x the server CPU per request of two, the median of the per-round ratios.',
    '',
    '| server | CPU µs/req, two windows | three windows | ratio (median) | ratios, lowest-highest |',
    '| --- | --- | --- | --- | --- |',
    ...lines,
    '',
  ].join('\n');
  writeFileSync(join(ROOT, 'bench/results/windows.md'), report);
  console.log(report);
} finally {
  for (const server of servers) await server.stop();
  await database.drop();
}
