import { randomBytes } from 'node:crypto';
import type { Fixture } from './fixtures.js';
import type { RequestShape } from './load.js';
import type { ServerSpec } from '../test/support/processes.js';

/** The servers of a run, by the name the report shows. */
export const SERVER_LABELS = {
  bare: 'bare',
  'bare-pg': 'bare+pg',
  'ours-memory': 'ours (memory store)',
  'ours-redis': 'ours (Redis store)',
  'ours-pglite': 'ours (PGlite)',
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
 * The real service as deployed: the compiled dist/server.js with production settings, info
 * logging to its log file, nothing switched off. Each store is chosen by configuration alone.
 */
export const oursSpec = (
  /** A ServerName, or another for an instance outside the alternation (the memory scenario, the profile). */
  name: string,
  env: { DATABASE_URL?: string; DATA_DIR?: string; REDIS_URL?: string; REDIS_KEY_PREFIX?: string },
  extraNodeArgs: string[] = [],
): ServerSpec => ({
  name,
  nodeArgs: [...extraNodeArgs, 'dist/server.js'],
  // Explicitly empty rather than inherited, so a REDIS_URL in the caller's environment changes nothing.
  env: { ...PRODUCTION, REDIS_URL: '', ...env },
  readyPath: '/readyz',
});

export interface Databases {
  postgresUrl: string;
  postgres: Fixture;
  pgliteDir: string;
  pglite: Fixture;
  redisUrl: string;
  redisKeyPrefix: string;
}

export function serverSpecs(db: Databases): Record<ServerName, ServerSpec> {
  return {
    bare: baseline('bare', 'bench/servers/bare.ts'),
    'bare-pg': baseline('bare-pg', 'bench/servers/bare-pg.ts', { DATABASE_URL: db.postgresUrl }),
    'ours-memory': oursSpec('ours-memory', { DATABASE_URL: db.postgresUrl }),
    'ours-redis': oursSpec('ours-redis', { DATABASE_URL: db.postgresUrl, REDIS_URL: db.redisUrl, REDIS_KEY_PREFIX: db.redisKeyPrefix }),
    'ours-pglite': oursSpec('ours-pglite', { DATA_DIR: db.pgliteDir }),
  };
}

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });
const JSON_BODY = { 'content-type': 'application/json' };
const NEW_PET = JSON.stringify({ name: 'Benchmark', categoryId: 3, status: 'available' });

export const LIST_PATH = '/v1/pets?limit=20&status=available';

/** The service's operations, as a client with a valid key sends them. */
export const operations = (fixture: Fixture) => ({
  list: { method: 'GET', path: LIST_PATH, headers: bearer(fixture.apiKey) },
  deepPage: {
    method: 'GET',
    path: `/v1/pets?limit=20&status=available&cursor=${fixture.deepCursor}`,
    headers: bearer(fixture.apiKey),
  },
  byId: { method: 'GET', path: `/v1/pets/${fixture.petId}`, headers: bearer(fixture.apiKey) },
  create: { method: 'POST', path: '/v1/pets', headers: { ...bearer(fixture.apiKey), ...JSON_BODY }, body: NEW_PET },
}) satisfies Record<string, RequestShape>;

/** A random key of the right shape, so every request pays for the hash and the keyring lookup. */
export const randomWellFormedKey = () => `psk_${randomBytes(32).toString('base64url')}`;

/** The memory scenario's requests: the list operation, each with a key nobody was ever given. */
export const invalidKeyList: RequestShape = {
  method: 'GET',
  path: LIST_PATH,
  freshHeaders: () => bearer(randomWellFormedKey()),
};

/** One line of the results table: a request shape sent to one server. */
export interface Row {
  id: string;
  operation: string;
  server: ServerName;
  shape: RequestShape;
  /** The id of the row this one is measured against as its database ceiling (req/s and p99). */
  databaseCeiling: string;
}

export const rowId = (server: ServerName, operation: string) => `${server} ${operation}`;

export const LIST = `GET ${LIST_PATH}`;
export const CREATE = 'POST /v1/pets';
const BARE_LIST = 'GET /pets (20 pets from memory)';
const DB_LIST = 'GET /pets (the list query)';
const DB_INSERT = 'POST /pets (INSERT)';
export const BARE_ROW = rowId('bare', BARE_LIST);
export const DB_LIST_ROW = rowId('bare-pg', DB_LIST);
export const DB_INSERT_ROW = rowId('bare-pg', DB_INSERT);

/**
 * Reads first, writes after: POSTs grow the table, so every read round sees the same data.
 * Within a phase the rows are measured in turn, round after round (A B A B), to share the noise.
 */
export function phases(db: Databases): { reads: Row[]; writes: Row[] } {
  const ours = operations(db.postgres);
  const row = (server: ServerName, operation: string, shape: RequestShape, databaseCeiling = DB_LIST_ROW): Row => ({
    id: rowId(server, operation),
    operation,
    server,
    shape,
    databaseCeiling,
  });
  const stores = ['ours-memory', 'ours-redis'] as const;
  const reads: Row[] = [
    row('bare', BARE_LIST, { method: 'GET', path: '/pets' }),
    row('bare-pg', DB_LIST, { method: 'GET', path: '/pets' }),
    ...stores.map((store) => row(store, LIST, ours.list)),
    ...stores.map((store) => row(store, 'GET /v1/pets?...&cursor= (a page 90% through)', ours.deepPage)),
    ...stores.map((store) => row(store, 'GET /v1/pets/{id} (deprecated)', ours.byId)),
    row('ours-pglite', LIST, operations(db.pglite).list),
  ];
  const writes: Row[] = [
    row('bare-pg', DB_INSERT, { method: 'POST', path: '/pets', headers: JSON_BODY, body: NEW_PET }, DB_INSERT_ROW),
    ...stores.map((store) => row(store, CREATE, ours.create, DB_INSERT_ROW)),
  ];
  return { reads, writes };
}
