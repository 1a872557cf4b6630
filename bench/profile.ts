/**
 * `npm run bench:profile`: the compiled service (memory store, PostgreSQL) under the
 * GET /v1/pets load of the benchmark, with `node --cpu-prof`; where its time goes, by function
 * and by area over the measured seconds, to bench/results/profile.md. Takes the benchmark's --connections, --duration and --warmup.
 */
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { monotonicMicroseconds, renderProfile, summarizeProfile, type CpuProfile, type Window } from './cpu-profile.js';
import { createSeededPostgres } from './fixtures.js';
import { load } from './load.js';
import { parseOptions } from './options.js';
import { ROOT, startServer } from '../harness/processes.js';
import { buildService } from './processes.js';
import { LIST, operations, oursSpec } from './scenarios.js';

const RESULTS_DIR = join(ROOT, 'bench/results');
const PROFILE_DIR = join(RESULTS_DIR, 'cpuprofile');

async function main() {
  const options = parseOptions(process.argv.slice(2));
  await buildService();
  const postgres = await createSeededPostgres(options.postgresUrl, `${options.databaseName}_profile`);
  rmSync(PROFILE_DIR, { recursive: true, force: true });
  mkdirSync(PROFILE_DIR, { recursive: true });
  try {
    const server = await startServer({
      ...oursSpec('ours-profiled', { DATABASE_URL: postgres.url }, ['--cpu-prof', `--cpu-prof-dir=${PROFILE_DIR}`]),
      logDir: RESULTS_DIR,
    });
    const list = operations(postgres.fixture).list;
    let measured;
    let window: Window;
    try {
      await load(server.origin, list, options.connections, { seconds: options.warmupSeconds });
      const fromUs = monotonicMicroseconds();
      measured = await load(server.origin, list, options.connections, { seconds: options.durationSeconds });
      window = { fromUs, toUs: monotonicMicroseconds() };
    } finally {
      // V8 writes the profile when the process exits.
      await server.stop();
    }
    const [file] = readdirSync(PROFILE_DIR).filter((name) => name.endsWith('.cpuprofile'));
    if (!file) throw new Error(`no .cpuprofile in ${PROFILE_DIR}: did the server exit cleanly?`);
    const profile = JSON.parse(readFileSync(join(PROFILE_DIR, file), 'utf8')) as CpuProfile;
    const loadLine =
      `Load: autocannon -c ${options.connections} on \`${LIST}\`, ${options.warmupSeconds} s warm-up and ${options.durationSeconds} s measured: ` +
      `${Math.round(measured.requestsPerSecond)} req/s (profiling slows it down), p99 ${measured.p99Ms} ms, ${measured.non2xx + measured.failed} errors.`;
    const markdown = renderProfile(
      summarizeProfile(profile, ROOT, window),
      `# CPU profile of ours under GET /v1/pets\n\n${new Date().toISOString()}, memory store, PostgreSQL. ${loadLine}\nProfile: bench/results/cpuprofile/${file}`,
    );
    writeFileSync(join(RESULTS_DIR, 'profile.md'), markdown);
    console.log(markdown);
  } finally {
    await postgres.drop();
  }
}

main().catch((error: Error) => {
  console.error(`[bench:profile] failed: ${error.stack ?? error.message}`);
  process.exit(1);
});
