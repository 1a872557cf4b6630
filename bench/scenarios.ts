import { randomBytes } from 'node:crypto';
import { encodeCursor } from '../src/platform/pagination.js';
import { WALK_CURSOR_COUNT, type Fixture } from './fixtures.js';
import type { RequestShape, RequestSpec } from './load.js';
import type { ServerSpec } from '../harness/processes.js';

/** The servers of a run, by the name the report shows. */
export const SERVER_LABELS = {
  bare: 'bare',
  'bare-pg': 'bare+pg',
  'ours-memory': 'ours (memory store)',
  'ours-redis': 'ours (Redis store)',
  'ours-memory-concurrency': 'ours (memory store, concurrency limits on)',
  'ours-redis-concurrency': 'ours (Redis store, defaults: concurrency limits on)',
  'ours-pglite': 'ours (PGlite)',
  'ours-unnamed': 'ours (memory store, unnamed statements)',
  'ours-sampled': 'ours (memory store, traced, sampled at 5%)',
  'ours-traced': 'ours (memory store, traced, every request)',
  'ours-redis-sampled': 'ours (Redis store, defaults, traced, sampled at 5%)',
  'ours-redis-traced': 'ours (Redis store, defaults, traced, every request)',
  'ours-unrecorded': 'ours (memory store, no usage record)',
} as const;
export type ServerName = keyof typeof SERVER_LABELS;

/** Every server of the benchmark runs as in production. */
const PRODUCTION = { NODE_ENV: 'production' };

const baseline = (name: ServerName, script: string, env: Record<string, string> = {}): ServerSpec => ({
  name,
  nodeArgs: ['--import', 'tsx', script],
  env: { ...PRODUCTION, ...env },
  readyPath: '/pets',
});

/**
 * Issue #38's additions to the rate limiter, all off, as in the builds before them, so that the
 * rows of ours compare with those builds' (`npm run bench:compare`). Concurrency limits are on by
 * default and switched off here; shadow mode, operation costs and usage webhooks are off by default
 * (an empty setting is its default), and are set empty only so that none is inherited from the
 * caller's environment. A build before them ignores all four: loadConfig reads only the settings it knows.
 */
export const LIMITS_OFF = {
  RATE_LIMIT_CONCURRENCY: 'off',
  RATE_LIMIT_SHADOW_PLANS: '',
  RATE_LIMIT_COSTS: '',
  WEBHOOK_URL: '',
} as const;

/**
 * The seed plans' concurrency limits (migrations/019), which the ours-*-concurrency servers run with: set
 * explicitly, as builds before plans were rows took them from RATE_LIMIT_CONCURRENCY's default, so both run alike.
 */
export const DEFAULT_CONCURRENCY = 'free=5,pro=20,business=50,enterprise=100';

/**
 * The real service as deployed: the compiled dist/server.js with production settings, info
 * logging to its log file. Each store is chosen by configuration alone. Issue #38's limits are
 * off (LIMITS_OFF), so that the rows measure the same path as before them; the
 * ours-*-concurrency servers measure what concurrency limits cost.
 */
export const oursSpec = (
  /** A ServerName, or another for an instance outside the alternation (the memory scenario, the profile). */
  name: string,
  env: {
    DATABASE_URL?: string;
    DATA_DIR?: string;
    REDIS_URL?: string;
    REDIS_KEY_PREFIX?: string;
    DATABASE_PREPARED_STATEMENTS?: string;
    OTEL_EXPORTER_OTLP_ENDPOINT?: string;
    OTEL_TRACES_SAMPLER?: string;
    OTEL_TRACES_SAMPLER_ARG?: string;
    RATE_LIMIT_CONCURRENCY?: string;
    USAGE_RETENTION_DAYS?: string;
  },
  extraNodeArgs: string[] = [],
): ServerSpec => ({
  name,
  nodeArgs: [...extraNodeArgs, 'dist/server.js'],
  // Explicitly empty rather than inherited, so a REDIS_URL in the caller's environment changes nothing.
  env: { ...PRODUCTION, REDIS_URL: '', ...LIMITS_OFF, ...env },
  readyPath: '/readyz',
});

export interface Databases {
  /** The OTLP/HTTP sink the traced server exports its spans to. */
  otlpEndpoint: string;
  postgresUrl: string;
  postgres: Fixture;
  pgliteDir: string;
  pglite: Fixture;
  redisUrl: string;
  redisKeyPrefix: string;
}

/** The share of requests the sampled server traces (the ratio the operating docs suggest). */
export const TRACING_SAMPLE_RATIO = 0.05;

/** Each store with concurrency limits off (as every other row of ours) and on, measured on the hot page in the same rounds. */
export const CONCURRENCY_PAIRS = [
  { store: 'memory store', off: 'ours-memory', on: 'ours-memory-concurrency' },
  { store: 'Redis store', off: 'ours-redis', on: 'ours-redis-concurrency' },
] as const satisfies ReadonlyArray<{ store: string; off: ServerName; on: ServerName }>;

/**
 * Tracing off, sampled and every request traced, on the hot page in the same rounds: with the memory
 * store (issue #36) and with the production default, the Redis store with concurrency limits on (issue #46).
 */
export const TRACING_SETS = [
  { store: 'memory store', off: 'ours-memory', sampled: 'ours-sampled', traced: 'ours-traced' },
  { store: 'Redis store, defaults', off: 'ours-redis-concurrency', sampled: 'ours-redis-sampled', traced: 'ours-redis-traced' },
] as const satisfies ReadonlyArray<{ store: string; off: ServerName; sampled: ServerName; traced: ServerName }>;

/**
 * The usage record (issue #48) on and off, on the hot page in the same rounds: every server of ours
 * records (the default), ours-unrecorded keeps no record (USAGE_RETENTION_DAYS=0). What recording
 * costs is on over off.
 */
export const USAGE_RECORDING = { on: 'ours-memory', off: 'ours-unrecorded' } as const satisfies { on: ServerName; off: ServerName };

/** Tracing sampled at TRACING_SAMPLE_RATIO, and every request traced, exporting to the bench's OTLP/HTTP sink. */
const tracing = (db: Databases) => ({
  sampled: {
    OTEL_EXPORTER_OTLP_ENDPOINT: db.otlpEndpoint,
    OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
    OTEL_TRACES_SAMPLER_ARG: String(TRACING_SAMPLE_RATIO),
  },
  traced: { OTEL_EXPORTER_OTLP_ENDPOINT: db.otlpEndpoint, OTEL_TRACES_SAMPLER: 'always_on' },
});

export function serverSpecs(db: Databases): Record<ServerName, ServerSpec> {
  const traced = tracing(db);
  const redisDefaults = {
    DATABASE_URL: db.postgresUrl,
    REDIS_URL: db.redisUrl,
    REDIS_KEY_PREFIX: db.redisKeyPrefix,
    RATE_LIMIT_CONCURRENCY: DEFAULT_CONCURRENCY,
  };
  return {
    bare: baseline('bare', 'bench/servers/bare.ts'),
    'bare-pg': baseline('bare-pg', 'bench/servers/bare-pg.ts', { DATABASE_URL: db.postgresUrl }),
    'ours-memory': oursSpec('ours-memory', { DATABASE_URL: db.postgresUrl }),
    'ours-redis': oursSpec('ours-redis', { DATABASE_URL: db.postgresUrl, REDIS_URL: db.redisUrl, REDIS_KEY_PREFIX: db.redisKeyPrefix }),
    // The default per-plan limits, beside ours-memory and ours-redis in the same rounds: the bench's key is
    // an enterprise key, whose 100 requests in flight are above the run's connections (50; run.ts checks).
    'ours-memory-concurrency': oursSpec('ours-memory-concurrency', {
      DATABASE_URL: db.postgresUrl,
      RATE_LIMIT_CONCURRENCY: DEFAULT_CONCURRENCY,
    }),
    'ours-redis-concurrency': oursSpec('ours-redis-concurrency', redisDefaults),
    'ours-pglite': oursSpec('ours-pglite', { DATA_DIR: db.pgliteDir }),
    // As behind a transaction pooler: what named statements save is this row against ours-memory's.
    'ours-unnamed': oursSpec('ours-unnamed', { DATABASE_URL: db.postgresUrl, DATABASE_PREPARED_STATEMENTS: 'false' }),
    // What the usage record costs, against ours-memory's hot page (which records, as every other server of ours).
    'ours-unrecorded': oursSpec('ours-unrecorded', { DATABASE_URL: db.postgresUrl, USAGE_RETENTION_DAYS: '0' }),
    // What tracing costs when on, against ours-memory's rows (tracing off): sampled as the operating
    // docs advise, and every request traced; the sampled spans exported over OTLP/HTTP to the bench's sink.
    'ours-sampled': oursSpec('ours-sampled', { DATABASE_URL: db.postgresUrl, ...traced.sampled }),
    'ours-traced': oursSpec('ours-traced', { DATABASE_URL: db.postgresUrl, ...traced.traced }),
    // The same against ours-redis-concurrency's hot page: what tracing costs the production default.
    'ours-redis-sampled': oursSpec('ours-redis-sampled', { ...redisDefaults, ...traced.sampled }),
    'ours-redis-traced': oursSpec('ours-redis-traced', { ...redisDefaults, ...traced.traced }),
  };
}

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });
const JSON_BODY = { 'content-type': 'application/json' };
const NEW_PET = JSON.stringify({ name: 'Benchmark', categoryId: 3, status: 'available' });

export const LIST_PATH = '/v1/pets?limit=20&status=available';
/** The largest page of the listing: what a revalidation saves grows with the page. */
export const FULL_PAGE_PATH = '/v1/pets?limit=100';

/** The walk's limits are drawn from 1 to the service's largest, 100. */
export const WALK_MAX_LIMIT = 100;
/** Per connection: this many hot GETs, then one POST, over and over. */
export const MIXED_READS = 9;

const randomBelow = (count: number) => Math.floor(Math.random() * count);

/** A page of the walk: the index of one of the fixture's cursors and a limit from 1 to WALK_MAX_LIMIT. */
interface WalkPage {
  cursor: number;
  limit: number;
}
const randomWalkPage = (): WalkPage => ({ cursor: randomBelow(WALK_CURSOR_COUNT), limit: 1 + randomBelow(WALK_MAX_LIMIT) });

/** The same page of the unfiltered listing, as the service and as bare+pg are asked for it. */
function walkPaths(fixture: Fixture) {
  // Encoded once: a request then costs the load generator two random numbers and a string template.
  const cursors = fixture.walkAfterIds.map((id) => encodeCursor(id, undefined));
  return {
    ours: ({ cursor, limit }: WalkPage) => `/v1/pets?limit=${limit}&cursor=${cursors[cursor]}`,
    bare: ({ cursor, limit }: WalkPage) => `/walk?after=${fixture.walkAfterIds[cursor]}&limit=${limit}`,
  };
}

/** The service's operations, as a client with a valid key sends them. */
export const operations = (fixture: Fixture) => {
  const walk = walkPaths(fixture);
  const list = { method: 'GET', path: LIST_PATH, headers: bearer(fixture.apiKey) } satisfies RequestSpec;
  const create = {
    method: 'POST',
    path: '/v1/pets',
    headers: { ...bearer(fixture.apiKey), ...JSON_BODY },
    body: NEW_PET,
  } satisfies RequestSpec;
  return {
    list,
    listThreeWindows: { ...list, headers: bearer(fixture.threeWindowsKey) },
    deepPage: {
      method: 'GET',
      path: `/v1/pets?limit=20&status=available&cursor=${fixture.deepCursor}`,
      headers: bearer(fixture.apiKey),
    },
    byId: { method: 'GET', path: `/v1/pets/${fixture.petId}`, headers: bearer(fixture.apiKey) },
    fullPage: { method: 'GET', path: FULL_PAGE_PATH, headers: bearer(fixture.apiKey) },
    create,
    walk: {
      method: 'GET',
      path: walk.ours({ cursor: 0, limit: WALK_MAX_LIMIT }),
      headers: bearer(fixture.apiKey),
      freshPath: () => walk.ours(randomWalkPage()),
    },
    mixed: [...Array.from({ length: MIXED_READS }, () => list), create],
  } satisfies Record<string, RequestShape>;
};

/** The request sent again by a client that holds the response tagged `etag`: answered 304 while the page is unchanged. */
export const revalidating = (request: RequestSpec, etag: string): RequestSpec => ({
  ...request,
  headers: { ...request.headers, 'if-none-match': etag },
});

/** bare+pg's routes for the same workloads. */
export const baselineOperations = (fixture: Fixture) => {
  const walk = walkPaths(fixture);
  const list = { method: 'GET', path: '/pets' } satisfies RequestSpec;
  const insert = { method: 'POST', path: '/pets', headers: JSON_BODY, body: NEW_PET } satisfies RequestSpec;
  return {
    list,
    insert,
    walk: { method: 'GET', path: walk.bare({ cursor: 0, limit: WALK_MAX_LIMIT }), freshPath: () => walk.bare(randomWalkPage()) },
    mixed: [...Array.from({ length: MIXED_READS }, () => list), insert],
  } satisfies Record<string, RequestShape>;
};

/**
 * Pages the service and bare+pg must answer with the same pets, checked before any load: the
 * baseline runs the same query, so the ratios compare like with like. Walk pages: the first and
 * last cursor and a few random ones.
 */
export function samePages(fixture: Fixture): Array<{ name: string; ours: RequestSpec; baseline: RequestSpec }> {
  const ours = operations(fixture);
  const walk = walkPaths(fixture);
  const pages: WalkPage[] = [
    { cursor: 0, limit: 1 },
    { cursor: WALK_CURSOR_COUNT - 1, limit: WALK_MAX_LIMIT },
    ...Array.from({ length: 5 }, randomWalkPage),
  ];
  return [
    { name: 'hot', ours: ours.list, baseline: baselineOperations(fixture).list },
    ...pages.map((page) => ({
      name: `walk ${walk.ours(page)}`,
      ours: { method: 'GET' as const, path: walk.ours(page), headers: ours.list.headers },
      baseline: { method: 'GET' as const, path: walk.bare(page) },
    })),
  ];
}

/** A random key of the right shape, so every request pays for the hash and the keyring lookup. */
export const randomWellFormedKey = () => `psk_${randomBytes(32).toString('base64url')}`;

/** The memory scenario's requests: the list operation, each with a key nobody was ever given. */
export const invalidKeyList: RequestShape = {
  method: 'GET',
  path: LIST_PATH,
  freshHeaders: () => bearer(randomWellFormedKey()),
};

/** The workloads of the goals, each measured on ours (both stores) and on bare+pg. */
export const WORKLOADS = {
  hot: {
    ours: `GET ${LIST_PATH}, the same page again and again`,
    baseline: 'GET /pets, the same query',
  },
  walk: {
    ours:
      `GET /v1/pets?limit=L&cursor=C, per request a random L from 1 to ${WALK_MAX_LIMIT} and a random C of ${WALK_CURSOR_COUNT.toLocaleString('en-US')} ` +
      'cursors (after pets spread evenly over the table, every 10/3rd id), no status filter',
    baseline: 'GET /walk?after=ID&limit=L, the same unfiltered keyset query (limit + 1 rows, as the service reads them)',
  },
  write: {
    ours: 'POST /v1/pets',
    baseline: 'POST /pets, one INSERT per request',
  },
  mixed: {
    ours: `per connection, ${MIXED_READS} x the hot GET then 1 x POST /v1/pets, repeated`,
    baseline: `per connection, ${MIXED_READS} x GET /pets then 1 x POST /pets, repeated`,
  },
} as const;
export type Workload = keyof typeof WORKLOADS;

/** One line of the results table: a request shape sent to one server. */
export interface Row {
  id: string;
  operation: string;
  server: ServerName;
  shape: RequestShape;
  /** The id of the row this one is measured against as its database ceiling (req/s and p99). */
  databaseCeiling: string;
  /** The workload this row measures, if any. */
  workload?: Workload;
  /** Its requests revalidate a page the client holds: the answer expected is 304, not a 2xx. */
  revalidates?: boolean;
}

/** Whether a status is the answer a row's requests should get; anything else is an error. */
export const isExpected = (row: Row, status: number | string) =>
  row.revalidates ? String(status) === '304' : String(status).startsWith('2');

export const rowId = (server: ServerName, operation: string) => `${server} ${operation}`;

export const LIST = `GET ${LIST_PATH}`;
export const CREATE = 'POST /v1/pets';
export const WALK = `GET /v1/pets?limit=1..${WALK_MAX_LIMIT}&cursor=(1 of ${WALK_CURSOR_COUNT.toLocaleString('en-US')})`;
export const MIXED = `${MIXED_READS} x ${LIST} + 1 x ${CREATE}`;
/** The hot page with a key of three windows: against LIST (two), what each further window costs. */
export const LIST_THREE_WINDOWS = `${LIST} (three windows: a second, a minute, a day)`;
export const FULL_PAGE = `GET ${FULL_PAGE_PATH}`;
/** The two pages measured fresh (200) and revalidated (304). */
export const REVALIDATED_PAGES = [LIST, FULL_PAGE] as const;
export const revalidationOf = (operation: string) => `${operation}, If-None-Match: its ETag (304)`;
const BARE_LIST = 'GET /pets (20 pets from memory)';
const DB_LIST = 'GET /pets (the list query)';
const DB_WALK = `GET /walk?after=(1 of ${WALK_CURSOR_COUNT.toLocaleString('en-US')})&limit=1..${WALK_MAX_LIMIT}`;
const DB_INSERT = 'POST /pets (INSERT)';
const DB_MIXED = `${MIXED_READS} x GET /pets + 1 x POST /pets`;
export const BARE_ROW = rowId('bare', BARE_LIST);
export const DB_LIST_ROW = rowId('bare-pg', DB_LIST);

/** Each workload's rows: ours and bare+pg's route. */
export const WORKLOAD_ROWS: Record<Workload, { ours: string; baseline: string }> = {
  hot: { ours: LIST, baseline: DB_LIST_ROW },
  walk: { ours: WALK, baseline: rowId('bare-pg', DB_WALK) },
  write: { ours: CREATE, baseline: rowId('bare-pg', DB_INSERT) },
  mixed: { ours: MIXED, baseline: rowId('bare-pg', DB_MIXED) },
};

/**
 * Reads first, writes after: POSTs grow the table, so every read round sees the same data; the
 * mixed workload writes too, so it is measured with the writes. Within a phase the rows are
 * measured in turn, round after round (A B A B), to share the noise.
 */
export function phases(db: Databases, etags: { list: string; fullPage: string }): { reads: Row[]; writes: Row[] } {
  const ours = operations(db.postgres);
  const baseline = baselineOperations(db.postgres);
  const row = (server: ServerName, operation: string, shape: RequestShape, databaseCeiling = DB_LIST_ROW, workload?: Workload): Row => ({
    id: rowId(server, operation),
    operation,
    server,
    shape,
    databaseCeiling,
    ...(workload && { workload }),
  });
  const stores = ['ours-memory', 'ours-redis'] as const;
  /** bare+pg's row of a workload, then ours with each store. */
  const workload = (name: Workload, baselineOperation: string, baselineShape: RequestShape, oursShape: RequestShape): Row[] => {
    const { ours: operation, baseline: ceiling } = WORKLOAD_ROWS[name];
    return [
      row('bare-pg', baselineOperation, baselineShape, ceiling, name),
      ...stores.map((store) => row(store, operation, oursShape, ceiling, name)),
    ];
  };
  const reads: Row[] = [
    row('bare', BARE_LIST, { method: 'GET', path: '/pets' }),
    ...workload('hot', DB_LIST, baseline.list, ours.list),
    ...stores.map((store) => row(store, LIST_THREE_WINDOWS, ours.listThreeWindows)),
    // Every variant of the hot page right after it: the goals' ratios between them then span a minute
    // of the machine's changing load, not several.
    ...CONCURRENCY_PAIRS.map(({ on }) => row(on, LIST, ours.list)),
    ...TRACING_SETS.flatMap(({ sampled, traced }) => [row(sampled, LIST, ours.list), row(traced, LIST, ours.list)]),
    row(USAGE_RECORDING.off, LIST, ours.list),
    ...workload('walk', DB_WALK, baseline.walk, ours.walk),
    ...stores.map((store) => row(store, 'GET /v1/pets?...&cursor= (a page 90% through)', ours.deepPage)),
    ...stores.map((store) => row(store, 'GET /v1/pets/{id} (deprecated)', ours.byId)),
    ...stores.flatMap((store) => [
      { ...row(store, revalidationOf(LIST), revalidating(ours.list, etags.list)), revalidates: true },
      row(store, FULL_PAGE, ours.fullPage),
      { ...row(store, revalidationOf(FULL_PAGE), revalidating(ours.fullPage, etags.fullPage)), revalidates: true },
    ]),
    row('ours-pglite', LIST, operations(db.pglite).list),
    row('ours-unnamed', WALK, ours.walk, WORKLOAD_ROWS.walk.baseline),
    row('ours-traced', WALK, ours.walk, WORKLOAD_ROWS.walk.baseline),
  ];
  const writes: Row[] = [
    ...workload('write', DB_INSERT, baseline.insert, ours.create),
    row('ours-unnamed', CREATE, ours.create, WORKLOAD_ROWS.write.baseline),
    row('ours-traced', CREATE, ours.create, WORKLOAD_ROWS.write.baseline),
    ...workload('mixed', DB_MIXED, baseline.mixed, ours.mixed),
  ];
  return { reads, writes };
}
