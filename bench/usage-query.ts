/**
 * The usage record's worst case (issue 54, finding 4): 366 days of hours for 40 keys of one customer
 * with groupBy=key, 351,360 rows seeded in SQL, read as JSON pages and as one CSV stream by a
 * read-scope token, alone and three at once, while a worker thread probes /v1 with an unrelated key.
 * Prints a summary line per phase (the probe's p50 and max, its non-200s, the server's RSS before,
 * at its peak and after) and writes bench/results/usage-query.md. Exits 1 when an outcome is wrong:
 * a probe not answered 200 (a 503 shed), a walk not all 351,360 rows, or a CSV not byte-identical
 * to the rows of the JSON pages. Timings are reported, never asserted.
 *
 *   npm run bench:usage [-- --no-build]
 */
import { writeFileSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { createAdminTokensRepository } from '../src/admin/tokens-repository.js';
import { createApiKeysRepository } from '../src/api-keys/repository.js';
import { openExistingDatabase } from '../harness/databases.js';
import { freePort } from '../harness/free-port.js';
import { SERVICE_NODE_ARGS, startServer, type ServerProcess } from '../harness/processes.js';
import { createSeededPostgres } from './fixtures.js';
import { buildService } from './processes.js';
import { minuteAndDay } from '../src/plans/limits.js';

const POSTGRES_URL = process.env.BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const KEYS = 40;
const HOURS = 366 * 24;
const START = Date.UTC(2024, 0, 1);
const END = START + HOURS * 3_600_000;
const UNREACHABLE_LIMIT = 2_147_483_647;

/** Sequential GETs of `url` in a thread of its own (its own event loop: the walks' parsing here does not delay it). */
const PROBE = `
const { parentPort, workerData } = require('node:worker_threads');
let latencies = [], statuses = {}, running = true;
parentPort.on('message', (message) => {
  if (message === 'take') { parentPort.postMessage({ latencies, statuses }); latencies = []; statuses = {}; }
  if (message === 'stop') running = false;
});
(async () => {
  while (running) {
    const started = performance.now();
    const status = await fetch(workerData.url, { headers: { authorization: workerData.authorization } })
      .then(async (response) => (await response.arrayBuffer(), response.status), () => 'error');
    latencies.push(performance.now() - started);
    statuses[status] = (statuses[status] ?? 0) + 1;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  parentPort.close();
})();`;

interface Probed {
  latencies: number[];
  statuses: Record<string, number>;
}

const take = (probe: Worker) =>
  new Promise<Probed>((resolve) => {
    probe.once('message', resolve);
    probe.postMessage('take');
  });

interface Row {
  start: string;
  keyId: number;
  requests: number;
  units: number;
  refused: { rateLimited: number; concurrency: number; credits: number; banned: number };
}

/** What the CSV of the JSON rows is (docs/admin-api.md): a header line, a CRLF-ended line per row. */
const csvOf = (rows: Row[]) =>
  'start,keyId,requests,units,refusedRateLimited,refusedConcurrency,refusedCredits,refusedBanned\r\n' +
  rows
    .map(({ start, keyId, requests, units, refused: r }) =>
      [start, keyId, requests, units, r.rateLimited, r.concurrency, r.credits, r.banned].join(','),
    )
    .map((line) => `${line}\r\n`)
    .join('');

/** Every page of the query, following rel="next" links; the rows and the pages' count. */
async function walkJson(admin: string, query: string, token: string) {
  const rows: Row[] = [];
  let pages = 0;
  for (let url: string | undefined = `${admin}/admin/v1/usage?${query}`; url;) {
    const response: Response = await fetch(url, { headers: { authorization: `Bearer ${token}` } });
    if (response.status !== 200) throw new Error(`a page answered ${response.status}: ${await response.text()}`);
    rows.push(...((await response.json()) as Row[]));
    pages++;
    const next: string | undefined = /<([^>]+)>; rel="next"/.exec(response.headers.get('link') ?? '')?.[1];
    url = next && new URL(next, admin).href;
  }
  return { rows, pages };
}

async function readCsv(admin: string, query: string, token: string) {
  const response = await fetch(`${admin}/admin/v1/usage?${query}`, { headers: { authorization: `Bearer ${token}`, accept: 'text/csv' } });
  if (response.status !== 200) throw new Error(`the CSV answered ${response.status}: ${await response.text()}`);
  return response.text();
}

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))] ?? 0;
const mib = (bytes: number) => `${Math.round(bytes / 1_048_576)} MiB`;

/** Runs `work` while sampling the server's RSS; the probe's figures over it, and the RSS before, at its peak and after. */
async function phase(name: string, server: ServerProcess, probe: Worker, work: () => Promise<unknown>) {
  await take(probe);
  const before = server.rssBytes();
  let peak = before;
  const sampler = setInterval(() => (peak = Math.max(peak, server.rssBytes())), 20);
  const started = performance.now();
  let failure: string | undefined;
  try {
    await work();
  } catch (error) {
    failure = (error as Error).message;
  } finally {
    clearInterval(sampler);
  }
  const seconds = (performance.now() - started) / 1000;
  const after = server.rssBytes();
  const { latencies, statuses } = await take(probe);
  const sorted = latencies.sort((a, b) => a - b);
  const line =
    `${name}: ${seconds.toFixed(2)} s; /v1 probes ${sorted.length}, p50 ${percentile(sorted, 0.5).toFixed(1)} ms, ` +
    `max ${(sorted.at(-1) ?? 0).toFixed(1)} ms, statuses ${JSON.stringify(statuses)}; RSS ${mib(before)} -> peak ${mib(peak)} -> ${mib(after)}` +
    (failure ? `; FAILED: ${failure}` : '');
  console.log(line);
  return { line, failure };
}

async function seed(url: string) {
  const db = await openExistingDatabase({ url });
  try {
    const [customer] = await db.query<{ id: number }>(`INSERT INTO customers (external_id) VALUES ('cus_bench_usage') RETURNING id`);
    const keys = createApiKeysRepository(db);
    const keyIds: number[] = [];
    for (let i = 0; i < KEYS; i++)
      keyIds.push((await keys.create({ plan: 'enterprise', limits: minuteAndDay(1_000, 100_000), customerId: customer!.id })).record.id);
    const probeKey = await keys.create({ plan: 'enterprise', limits: minuteAndDay(UNREACHABLE_LIMIT, UNREACHABLE_LIMIT) });
    // A plain client: the service's database layer times a query out long before these rows are in.
    const seeding = new pg.Client({ connectionString: url });
    await seeding.connect();
    await seeding.query(
      `INSERT INTO usage_hours (hour, key_id, customer_id, operation, requests, units, refused_rate_limited)
       SELECT $1::timestamptz + make_interval(hours => h), k, $2, 'listPets', 1 + (h + k) % 7, 1 + (h * k) % 11, (h + k) % 3
       FROM generate_series(0, $3::int - 1) AS h, unnest($4::bigint[]) AS k`,
      [new Date(START).toISOString(), customer!.id, HOURS, keyIds],
    );
    await seeding.query('VACUUM ANALYZE usage_hours');
    await seeding.end();
    const { token } = await createAdminTokensRepository(db).create(
      { name: 'bench usage', scope: 'read' },
      { name: 'bench', adminTokenId: null },
    );
    return { customerId: customer!.id, probeKey: probeKey.key, token };
  } finally {
    await db.close();
  }
}

async function main() {
  if (!process.argv.includes('--no-build')) await buildService();
  const database = await createSeededPostgres(POSTGRES_URL, 'pets_bench_usage');
  const { customerId, probeKey, token } = await seed(database.url);
  const adminPort = await freePort();
  // The production default of the load shedding (a stalled event loop answers 503); the seeded hours kept whatever today is.
  const server = await startServer({
    // BENCH_SERVER: another build's entry point (a copy of an older dist/ in the repository), to measure it the same way.
    nodeArgs: [...SERVICE_NODE_ARGS, process.env.BENCH_SERVER ?? 'dist/server.js'],
    name: 'usage-query',
    env: { DATABASE_URL: database.url, ADMIN_PORT: String(adminPort), LOAD_SHED_EVENT_LOOP_DELAY_MS: '1000', USAGE_RETENTION_DAYS: '4000' },
  });
  const admin = `http://127.0.0.1:${adminPort}`;
  const query = `customerId=${customerId}&start=${new Date(START).toISOString()}&end=${new Date(END).toISOString()}&groupBy=key`;
  const probe = new Worker(PROBE, {
    eval: true,
    workerData: { url: `${server.origin}/v1/pets?limit=1`, authorization: `Bearer ${probeKey}` },
  });
  const failures: string[] = [];
  const lines: string[] = [];
  try {
    await sleep(500);
    const measure = async (name: string, work: () => Promise<unknown>) => {
      const { line, failure } = await phase(name, server, probe, work);
      lines.push(line);
      if (failure) failures.push(`${name}: ${failure}`);
    };
    await measure('idle, 3 s', () => sleep(3_000));
    let walked = { rows: [] as Row[], pages: 0 };
    await measure('JSON pages, one walk', async () => (walked = await walkJson(admin, query, token)));
    lines.push(`  (${walked.rows.length} rows in ${walked.pages} pages)`);
    if (walked.rows.length !== HOURS * KEYS) failures.push(`the walk read ${walked.rows.length} rows, not ${HOURS * KEYS}`);
    let csv = '';
    await measure('CSV stream, one', async () => (csv = await readCsv(admin, query, token)));
    lines.push(`  (${csv.length} bytes)`);
    if (csv !== csvOf(walked.rows)) failures.push('the CSV is not byte-identical to the rows of the JSON pages');
    const three = <T>(read: () => Promise<T>) => Promise.all([read(), read(), read()]);
    await measure('JSON pages, three walks at once', () => three(() => walkJson(admin, query, token)));
    await measure('CSV stream, three at once', () => three(() => readCsv(admin, query, token)));
    for (const line of lines) {
      const statuses = /statuses (\{[^}]*\})/.exec(line)?.[1];
      if (statuses && Object.keys(JSON.parse(statuses) as object).some((status) => status !== '200'))
        failures.push(`a /v1 probe not answered 200: ${line}`);
    }
  } finally {
    probe.postMessage('stop');
    await server.stop();
    await database.drop();
  }
  const report = ["# The usage record's worst case (issue 54, finding 4)", '', '```', `npm run bench:usage`, ...lines, '```', ''];
  writeFileSync(new URL('results/usage-query.md', import.meta.url), report.join('\n'));
  if (failures.length > 0) {
    console.error(failures.join('\n'));
    process.exit(1);
  }
}

await main();
