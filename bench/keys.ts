/**
 * `npm run bench:keys`: start-up time and memory of the compiled service with many API keys in
 * the database (1,000,000 by default; `--keys N`). Keys are looked up on first use, so neither
 * should grow with their number: the same instance is started on an empty key table and on the
 * full one, side by side, and a known key is used on both. Writes bench/results/keys.md.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { migrate } from '../src/platform/db/migrate.js';
import { createApiKeysRepository } from '../src/api-keys/repository.js';
import { createScratchDatabase, openExistingDatabase } from '../harness/databases.js';
import { ROOT, startServer } from '../harness/processes.js';
import { buildService } from './processes.js';
import { minuteAndDay } from '../src/plans/limits.js';

const { values } = parseArgs({ options: { keys: { type: 'string', default: '1000000' }, postgres: { type: 'string' } } });
const KEYS = Number(values.keys);
const POSTGRES = values.postgres ?? process.env.BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const RESULTS_DIR = join(ROOT, 'bench/results');
const MiB = 1024 * 1024;

async function seeded(name: string, keys: number) {
  const scratch = await createScratchDatabase(POSTGRES, name);
  const db = await openExistingDatabase({ url: scratch.url });
  try {
    await migrate(db);
    if (keys > 0) {
      await db.query(
        "INSERT INTO api_keys (plan, key_hash) SELECT 'free', sha256(('bench key ' || i)::bytea) FROM generate_series(1, $1::int) AS i",
        [keys],
      );
    }
    const { key } = await createApiKeysRepository(db).create({
      plan: 'enterprise',
      name: 'bench',
      limits: minuteAndDay(2e9, 2e9),
    });
    return { ...scratch, key };
  } finally {
    await db.close();
  }
}

/** Time from spawn to a ready instance, its RSS then, and after 2,000 requests with a known key. */
async function measure(label: string, url: string, key: string) {
  const started = Date.now();
  const server = await startServer({
    name: `keys-${label}`,
    nodeArgs: ['dist/server.js'],
    env: { DATABASE_URL: url, NODE_ENV: 'production' },
    readyPath: '/readyz',
    logDir: RESULTS_DIR,
  });
  const readyMs = Date.now() - started;
  const readyRss = server.rssBytes();
  for (let i = 0; i < 2_000; i++) {
    const response = await fetch(`${server.origin}/v1/pets?limit=1`, { headers: { authorization: `Bearer ${key}` } });
    if (response.status !== 200) throw new Error(`${label}: GET /v1/pets answered ${response.status}`);
  }
  const servingRss = server.rssBytes();
  await server.stop();
  return { label, readyMs, readyRss, servingRss };
}

await buildService();
console.log(`seeding ${KEYS.toLocaleString('en')} keys...`);
const empty = await seeded('pets_bench_keys_empty', 0);
const full = await seeded('pets_bench_keys_full', KEYS);
try {
  const rows: Array<Awaited<ReturnType<typeof measure>>> = [];
  // Alternated, three times each, so that the machine's noise falls on both.
  for (let round = 0; round < 3; round++) {
    rows.push(await measure('no keys', empty.url, empty.key));
    rows.push(await measure(`${KEYS.toLocaleString('en')} keys`, full.url, full.key));
  }
  const median = (label: string, field: 'readyMs' | 'readyRss' | 'servingRss') =>
    rows
      .filter((row) => row.label === label)
      .map((row) => row[field])
      .sort((a, b) => a - b)[1]!;
  const table = [...new Set(rows.map((row) => row.label))].map(
    (label) =>
      `| ${label} | ${median(label, 'readyMs')} ms | ${(median(label, 'readyRss') / MiB).toFixed(1)} MiB | ${(median(label, 'servingRss') / MiB).toFixed(1)} MiB |`,
  );
  const report = [
    `# Start-up and memory with ${KEYS.toLocaleString('en')} API keys`,
    '',
    '`npm run bench:keys`: the compiled service on PostgreSQL, medians of 3 alternated starts; before keys were looked up on first use, 1,000,000 keys took 8 s to start and ~700 MB.',
    '',
    '| key table | time to ready | RSS when ready | RSS after 2,000 requests |',
    '| --- | --- | --- | --- |',
    ...table,
    '',
  ].join('\n');
  writeFileSync(join(RESULTS_DIR, 'keys.md'), report);
  console.log(report);
} finally {
  await empty.drop();
  await full.drop();
}
