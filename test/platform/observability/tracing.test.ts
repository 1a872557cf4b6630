import { createHash } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, request as httpRequest, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test as base, describe, expect } from 'vitest';
import { loadConfig } from '../../../src/config/load.js';
import { tracesEndpoint } from '../../../src/platform/observability/tracing.js';
import { cleanupStack } from '../../support/fixtures.js';
import { createScratchDatabase, openExistingDatabase } from '../../../harness/databases.js';
import { POSTGRES_URL } from '../../support/databases.js';
import type { StartedSpans } from '../../support/count-spans.js';
import { bearer, developmentKey, waitForKeyAt } from '../../support/keys.js';
import { migrate } from '../../../src/platform/db/migrate.js';
import type { Database } from '../../../src/platform/db/database.js';
import { run, SERVICE_NODE_ARGS, startServer } from '../../../harness/processes.js';

interface Attribute {
  key: string;
  value: { stringValue?: string; intValue?: string | number; boolValue?: boolean; doubleValue?: number };
}
interface Span {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes: Attribute[];
  /** OTLP's status: code 2 (STATUS_CODE_ERROR) for an error, absent or 0 when unset. */
  status?: { code?: number };
  scope: string;
}

/** OTLP's SPAN_KIND_SERVER: a request's own span. */
const SERVER = 2;
/** The instrumentations whose spans a request's span may have beneath it. */
const QUERIES_AND_COMMANDS = /instrumentation-(pg|ioredis)$/;

/** An OTLP/HTTP receiver: accepts POST /v1/traces (JSON, as the exporter sends it) and keeps every span. */
async function otlpReceiver() {
  const spans: Span[] = [];
  const contentTypes = new Set<string>();
  const server: Server = createServer((request, response) => {
    let body = '';
    request.on('data', (chunk: Buffer) => (body += chunk.toString()));
    request.on('end', () => {
      if (request.method !== 'POST' || request.url !== '/v1/traces') {
        response.writeHead(404).end();
        return;
      }
      contentTypes.add(String(request.headers['content-type']));
      // eslint-disable-next-line @typescript-eslint/no-explicit-any -- the OTLP JSON encoding, read as it comes
      const { resourceSpans } = JSON.parse(body) as { resourceSpans: any[] };
      for (const resource of resourceSpans) {
        for (const scopeSpans of resource.scopeSpans) {
          for (const span of scopeSpans.spans) spans.push({ ...span, scope: scopeSpans.scope.name, resource: resource.resource });
        }
      }
      response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return { origin: `http://127.0.0.1:${port}`, spans, contentTypes, close: () => new Promise((resolve) => server.close(resolve)) };
}

const attribute = (span: Span, key: string) => {
  const value = span.attributes.find((entry) => entry.key === key)?.value;
  // OTLP's JSON may write a 64-bit integer as a string.
  return value && (value.intValue !== undefined ? Number(value.intValue) : (value.stringValue ?? value.boolValue ?? value.doubleValue));
};

describe('the traces endpoint', () => {
  test('is the traces endpoint as given, else the general one with /v1/traces; unset, none', () => {
    expect(tracesEndpoint(loadConfig({}))).toBeUndefined();
    expect(tracesEndpoint(loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }))).toBe('http://collector:4318/v1/traces');
    expect(tracesEndpoint(loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/' }))).toBe('http://collector:4318/v1/traces');
    expect(
      tracesEndpoint(
        loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://t.example/x' }),
      ),
    ).toBe('https://t.example/x');
    expect(() => loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' })).toThrow('OTEL_EXPORTER_OTLP_ENDPOINT');
  });

  test("the sampler is one of the SDK's six names, its ratio from 0 to 1: anything else is refused at start, not defaulted", () => {
    expect(loadConfig({})).toMatchObject({ OTEL_TRACES_SAMPLER: 'parentbased_always_on', OTEL_TRACES_SAMPLER_ARG: 1 });
    expect(loadConfig({ OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.05' }).OTEL_TRACES_SAMPLER_ARG).toBe(0.05);
    expect(() => loadConfig({ OTEL_TRACES_SAMPLER: 'jaeger_remote' })).toThrow('OTEL_TRACES_SAMPLER');
    expect(() => loadConfig({ OTEL_TRACES_SAMPLER_ARG: '1.5' })).toThrow('OTEL_TRACES_SAMPLER_ARG');
  });

  test('the trusted parents are addresses and CIDRs; none by default', () => {
    expect(loadConfig({}).tracingTrustedParents).toEqual([]);
    expect(loadConfig({ TRACING_TRUSTED_PARENTS: '10.0.0.7, 10.2.0.0/16,::1' }).tracingTrustedParents).toEqual([
      '10.0.0.7',
      '10.2.0.0/16',
      '::1',
    ]);
    expect(() => loadConfig({ TRACING_TRUSTED_PARENTS: 'proxy.internal' })).toThrow(
      'Invalid TRACING_TRUSTED_PARENTS="proxy.internal": "proxy.internal" is not an IP address or CIDR',
    );
  });
});

/** A server traced to a receiver of its own, on a scratch database when PostgreSQL answers, with an API key of its own. */
async function tracedServer(
  defer: (each: () => unknown) => void,
  name: string,
  spec: { env?: Record<string, string>; nodeArgs?: string[]; prepare?: (db: Database) => Promise<unknown> } = {},
) {
  const receiver = await otlpReceiver();
  defer(() => receiver.close());
  const dataDir = await mkdtemp(join(tmpdir(), 'pets-tracing-'));
  defer(() => rm(dataDir, { recursive: true, force: true }));
  const scratch = POSTGRES_URL ? await createScratchDatabase(POSTGRES_URL) : undefined;
  if (scratch) defer(() => scratch.drop());
  const env = {
    DATABASE_URL: scratch?.url ?? '',
    DATA_DIR: dataDir,
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.origin,
    PETS_CACHE_MAX_BYTES: '0',
    ...spec.env,
  };
  if (spec.prepare) {
    // The server's database, made before it starts (migrated: the server then finds nothing to apply).
    const db = await openExistingDatabase({ url: scratch?.url, dataDir });
    try {
      await migrate(db);
      await spec.prepare(db);
    } finally {
      await db.close();
    }
  }
  // Ready, not only alive: load shedding answers 503 until its first health check.
  const server = await startServer({ name, env, nodeArgs: spec.nodeArgs, readyPath: '/readyz' });
  defer(() => server.stop());
  let key: string;
  if (scratch) {
    const created = await run(
      ['dist/cli/keys.js', 'create', '--plan', 'enterprise', '--per-minute', '100000', '--per-day', '1000000'],
      env,
    );
    key = created.stdout.trim().split('\n').at(-1)!;
  } else {
    key = await developmentKey(server);
  }
  return { receiver, server, key };
}

/** Creates a pet, waiting for a new key to be known to the server (it learns of it through NOTIFY or a lookup). */
async function createPet(origin: string, key: string) {
  for (;;) {
    const created = await fetch(`${origin}/v1/pets`, {
      method: 'POST',
      headers: { ...bearer(key), 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'Traced', categoryId: 1 }),
    });
    if (created.status !== 401) return created;
  }
}

/** A GET sent from a loopback address of the test's choosing (127.0.0.2 is loopback too), answered with its status. */
function getFrom(localAddress: string, url: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    httpRequest(url, { localAddress, headers, agent: false }, (response) => {
      response.resume();
      response.on('end', () => resolve(response.statusCode!));
    })
      .on('error', reject)
      .end();
  });
}

/** Sends `count` GETs of a page, 20 at a time, each with the traceparent `traceparentOf` gives it. */
async function sendTraced(count: number, send: (traceparent: string) => Promise<number>, traceparentOf: (i: number) => string) {
  for (let sent = 0; sent < count; sent += 20) {
    const statuses = await Promise.all(Array.from({ length: Math.min(20, count - sent) }, (_, i) => send(traceparentOf(sent + i))));
    for (const status of statuses) expect(status).toBe(200);
  }
}

/** The span id of the caller in each traceparent the tests send. */
const CALLER_SPAN = 'b7ad6b7169203331';

/** A W3C traceparent: a trace id of the test's (a prefix and a number), a caller's span id, and its sampled flag. */
const traceparentOf = (prefix: string, i: number, sampled: boolean) =>
  `00-${prefix}${i.toString(16).padStart(32 - prefix.length, '0')}-${CALLER_SPAN}-${sampled ? '01' : '00'}`;

/** The address TRACING_TRUSTED_PARENTS names in the test: a traced proxy of the operator's. */
const TRUSTED_PARENT = '127.0.0.2';

const test = base
  .extend(
    'traced',
    { scope: 'file' },
    // eslint-disable-next-line no-empty-pattern -- vitest reads a fixture's dependencies from this pattern
    async ({}, { onCleanup }) => cleanupStack(onCleanup, (defer) => tracedServer(defer, 'traced')),
  )
  .extend(
    'halfSampled',
    { scope: 'file' },
    // eslint-disable-next-line no-empty-pattern -- vitest reads a fixture's dependencies from this pattern
    async ({}, { onCleanup }) =>
      cleanupStack(onCleanup, (defer) =>
        // Not parent-based: a span beneath a request decided by the ratio must follow it, not draw again.
        tracedServer(defer, 'half-sampled', { env: { OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.5' } }),
      ),
  )
  .extend(
    'callersTraced',
    { scope: 'file' },
    // eslint-disable-next-line no-empty-pattern -- vitest reads a fixture's dependencies from this pattern
    async ({}, { onCleanup }) =>
      cleanupStack(onCleanup, (defer) =>
        // The sampler docs/operating.md suggests, with one trusted parent.
        tracedServer(defer, 'callers-traced', {
          env: {
            OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
            OTEL_TRACES_SAMPLER_ARG: '0.05',
            TRACING_TRUSTED_PARENTS: TRUSTED_PARENT,
          },
        }),
      ),
  )
  .extend(
    'failing',
    { scope: 'file' },
    // eslint-disable-next-line no-empty-pattern -- vitest reads a fixture's dependencies from this pattern
    async ({}, { onCleanup }) =>
      cleanupStack(onCleanup, (defer) =>
        // A real fault: the table the pets listing reads is gone, so the listing answers 500.
        tracedServer(defer, 'failing', { prepare: (db) => db.query('ALTER TABLE pets RENAME TO pets_elsewhere') }),
      ),
  )
  .extend(
    'unsampled',
    { scope: 'file' },
    // eslint-disable-next-line no-empty-pattern -- vitest reads a fixture's dependencies from this pattern
    async ({}, { onCleanup }) =>
      cleanupStack(onCleanup, (defer) =>
        tracedServer(defer, 'unsampled', {
          // The sampler an operator sets, at a ratio that samples no request.
          env: { OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0' },
          nodeArgs: [...SERVICE_NODE_ARGS, '--import', 'tsx', '--import', './test/support/count-spans.ts', 'dist/server.js'],
        }),
      ),
  );

/** Each trace's spans: its request's server span, and anything else in it. */
function traces(spans: Span[]) {
  return spans
    .filter((span) => span.kind === SERVER)
    .map((server) => ({ server, beneath: spans.filter((span) => span.traceId === server.traceId && span !== server) }));
}

/** The spans of a sampled request's trace are its server span and the queries and commands it made: nothing else. */
function expectQueriesAndCommandsOnly({ server, beneath }: ReturnType<typeof traces>[number]) {
  for (const span of beneath) {
    expect(span.parentSpanId, span.name).toBe(server.spanId);
    expect(span.scope, span.name).toMatch(QUERIES_AND_COMMANDS);
  }
}

describe('traces of the running server, sent to an OTLP/HTTP receiver', () => {
  test('a create and a list: one server span each, with its attributes, and only its queries and commands beneath; no API key anywhere', async ({
    traced: { receiver, server, key },
  }) => {
    const created = await createPet(server.origin, key);
    expect(created.status).toBe(201);
    const listed = await fetch(`${server.origin}/v1/pets?limit=5`, { headers: bearer(key) });
    expect(listed.status).toBe(200);
    await fetch(`${server.origin}/healthz`);
    // SIGTERM: the server closes, and sends the spans still batched before it exits.
    expect(await server.stop()).toBe(0);

    const { spans } = receiver;
    expect(receiver.contentTypes).toEqual(new Set(['application/json']));
    const names = JSON.stringify(spans.map((span) => [span.scope, span.name, span.traceId, span.parentSpanId]));
    const requests = traces(spans);
    const requestOf = (name: string, status: number) =>
      requests.find(({ server }) => server.name === name && attribute(server, 'http.response.status_code') === status);
    const create = requestOf('POST /v1/pets', 201);
    const list = requestOf('GET /v1/pets', 200);
    expect(create, names).toBeDefined();
    expect(list, names).toBeDefined();
    expect(create!.server.traceId).not.toBe(list!.server.traceId);
    // Every span is a request's, or beneath one: no span of a hook or the handler, none of no request.
    expect(spans.filter((span) => span.kind !== SERVER && span.parentSpanId === undefined)).toEqual([]);
    for (const request of requests) expectQueriesAndCommandsOnly(request);
    // Probes are not traced.
    expect(spans.some((span) => JSON.stringify(span.attributes).includes('/healthz'))).toBe(false);

    // HTTP's semantic conventions, and what the request's log line says of it.
    const lines = server
      .output()
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    for (const [{ server: span }, method, status, answer] of [
      [create!, 'POST', 201, created],
      [list!, 'GET', 200, listed],
    ] as const) {
      const logged = lines.find((line) => line.msg === 'request' && line.trace_id === span.traceId);
      expect(logged, "the request's log line names its trace").toBeDefined();
      expect(span.parentSpanId).toBeUndefined();
      expect(Object.fromEntries(span.attributes.map(({ key: name }) => [name, attribute(span, name)]))).toEqual({
        'http.request.method': method,
        'http.route': '/v1/pets',
        'http.response.status_code': status,
        'url.scheme': 'http',
        'url.path': '/v1/pets',
        'pet_store.request.id': answer.headers.get('x-request-id'),
        'pet_store.api_key.id': logged!.keyId,
        'pet_store.rate_limit.outcome': 'allowed',
      });
      expect(logged!.keyId).toEqual(expect.any(Number));
    }

    if (POSTGRES_URL) {
      // The listing's query beneath the list; the create's INSERT beneath the create.
      // Prepared statements are named after what they do (src/pets/repository.ts).
      expect(
        list!.beneath.some((span) => span.name.startsWith('pg.query:pets_list')),
        names,
      ).toBe(true);
      const insert = create!.beneath.find((span) => span.name.startsWith('pg.query:pets_insert'));
      expect(insert, names).toBeDefined();
      expect(attribute(insert!, 'db.system') ?? attribute(insert!, 'db.system.name')).toBe('postgresql');
    } else {
      // PGlite, in the process: no instrumentation sees its queries (docs/operating.md#tracing).
      expect(spans.filter((span) => span.scope.includes('pg'))).toEqual([]);
    }
    const commands = create!.beneath.filter((span) => span.scope.includes('ioredis'));
    if (process.env.REDIS_URL) {
      // The rate limiter's Redis round trips, within the request they counted.
      expect(commands.length, names).toBeGreaterThan(0);
      // Only the command is recorded, never its keys and arguments (key ids, client addresses).
      for (const command of commands)
        expect(attribute(command, 'db.statement') ?? attribute(command, 'db.query.text')).toMatch(/^[a-z]+$/i);
    } else {
      expect(commands).toEqual([]);
    }

    // Neither the key, nor its hash (what the database stores), nor the header in any span.
    const everything = JSON.stringify(spans);
    expect(everything).not.toContain(key);
    expect(everything).not.toContain(createHash('sha256').update(key).digest('hex'));
    expect(everything.toLowerCase()).not.toContain('bearer');
  });
});

describe('a request that fails', () => {
  test('a 500 is an error on its span (status ERROR, error.type 500), as every 5xx; a 400 is not', async ({
    failing: { receiver, server, key },
  }) => {
    await waitForKeyAt(server.origin, bearer(key));
    const failed = await fetch(`${server.origin}/v1/pets?limit=5`, { headers: bearer(key) });
    expect(failed.status).toBe(500);
    expect((await fetch(`${server.origin}/v1/pets?limit=0`, { headers: bearer(key) })).status).toBe(400);
    expect(await server.stop()).toBe(0);

    const spanOf = (status: number) =>
      traces(receiver.spans).findLast(({ server: span }) => attribute(span, 'http.response.status_code') === status)?.server;
    const names = JSON.stringify(receiver.spans.map((span) => [span.name, span.status, span.attributes]));
    const error = spanOf(500);
    expect(error, names).toBeDefined();
    expect(error!.status?.code).toBe(2);
    expect(attribute(error!, 'error.type')).toBe('500');
    expect(attribute(error!, 'pet_store.request.id')).toBe(failed.headers.get('x-request-id'));
    const refused = spanOf(400);
    expect(refused, names).toBeDefined();
    expect(refused!.status?.code ?? 0).toBe(0);
    expect(attribute(refused!, 'error.type')).toBeUndefined();
  });
});

describe('an unsampled request', () => {
  test('starts no span: no request, query or Redis command span, only the decision', async ({ unsampled: { receiver, server, key } }) => {
    expect((await createPet(server.origin, key)).status).toBe(201);
    expect((await fetch(`${server.origin}/v1/pets?limit=5`, { headers: bearer(key) })).status).toBe(200);
    // A caller's own unsampled trace: drawn at the ratio like any request, its trace id kept for the logs.
    const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00';
    expect((await fetch(`${server.origin}/v1/pets?limit=5`, { headers: { ...bearer(key), traceparent } })).status).toBe(200);
    expect(await server.stop()).toBe(0);

    const line = server
      .output()
      .split('\n')
      .find((each) => each.startsWith('{"startedSpans"'));
    const { startedSpans } = JSON.parse(line!) as { startedSpans: StartedSpans };
    // Decided before any span was asked for: no request asked for one, the one with a caller's
    // traceparent neither (its caller is not a trusted parent), and nothing beneath them: no span
    // for a query or a Redis command (nor for those of no request, which are never traced).
    expect(startedSpans).toEqual({ roots: [], remoteParent: 0, localParent: [] });
    expect(receiver.spans).toEqual([]);
    // Its log lines name no trace; the caller's trace is named where there is one.
    const logged = server
      .output()
      .split('\n')
      .filter((each) => each.startsWith('{') && each.includes('"msg":"request"'))
      .map((each) => JSON.parse(each) as { trace_id?: string });
    expect(logged.length).toBeGreaterThanOrEqual(3);
    expect(logged.slice(0, -1).filter((each) => each.trace_id !== undefined)).toEqual([]);
    expect(logged.at(-1)!.trace_id).toBe('0af7651916cd43dd8448eb211c80319c');
  });
});

describe('a sampled share of requests', () => {
  test('is the ratio set, each decided once and traced whole: its server span with its queries and commands beneath it', async ({
    halfSampled: { receiver, server, key },
  }) => {
    const requests = 400;
    for (let sent = 0; sent < requests; sent += 20) {
      const answers = await Promise.all(
        Array.from({ length: 20 }, () => fetch(`${server.origin}/v1/pets?limit=1`, { headers: bearer(key) })),
      );
      for (const answer of answers) expect(answer.status).toBe(200);
    }
    // Trace ids chosen to be small, which the SDK's ratio sampler would take every time: drawn like the rest.
    const chosen = 200;
    await sendTraced(
      chosen,
      async (traceparent) => (await fetch(`${server.origin}/v1/pets?limit=2`, { headers: { ...bearer(key), traceparent } })).status,
      (i) => traceparentOf('', i + 1, false),
    );
    expect(await server.stop()).toBe(0);

    const lists = traces(receiver.spans).filter(({ server: span }) => span.name === 'GET /v1/pets');
    const chosenTraced = lists.filter(({ server: span }) => span.parentSpanId === CALLER_SPAN);
    // 100 expected (standard deviation 7); decided by the trace id, all 200 would be.
    expect(chosenTraced.length).toBeGreaterThan(50);
    expect(chosenTraced.length).toBeLessThan(150);
    const roots = lists.filter(({ server: span }) => span.parentSpanId === undefined);
    // 200 expected, binomial (standard deviation 10): drawn twice, as by the request's decision and
    // then the SDK's own, about 100 would be.
    expect(roots.length).toBeGreaterThan(150);
    expect(roots.length).toBeLessThan(250);
    for (const request of lists) expectQueriesAndCommandsOnly(request);
    // No query or command without its request's span: a request is traced whole, or not at all.
    const servers = new Set(receiver.spans.filter((span) => span.kind === SERVER).map((span) => span.spanId));
    for (const span of receiver.spans) if (span.kind !== SERVER) expect(servers.has(span.parentSpanId!), span.name).toBe(true);
    // Uncached (PETS_CACHE_MAX_BYTES=0), a page is a query, of its request or of one that read the
    // same page at the same time (src/pets/pets-cache.ts coalesces them).
    if (POSTGRES_URL) expect(lists.some(({ beneath }) => beneath.some((span) => span.name.startsWith('pg.query:pets_list')))).toBe(true);
  });
});

describe("a caller's traceparent", () => {
  test("continues the caller's trace but decides nothing: 300 asking to be traced at 0.05 are drawn like the rest; a trusted parent's flag is followed", async ({
    callersTraced: { receiver, server, key },
  }) => {
    const page = `${server.origin}/v1/pets?limit=1`;
    const from = (address: string) => (traceparent: string) => getFrom(address, page, { ...bearer(key), traceparent });
    // From 127.0.0.1, a caller like any other: every one of its traceparents asks to be traced.
    await sendTraced(300, from('127.0.0.1'), (i) => traceparentOf('aa', i, true));
    // From the trusted parent: its decisions are followed, both ways.
    await sendTraced(40, from(TRUSTED_PARENT), (i) => traceparentOf('bb', i, true));
    await sendTraced(40, from(TRUSTED_PARENT), (i) => traceparentOf('cc', i, false));
    expect(await server.stop()).toBe(0);

    const requestSpans = (prefix: string) => receiver.spans.filter((span) => span.kind === SERVER && span.traceId.startsWith(prefix));
    const untrusted = requestSpans('aa');
    // 15 expected (binomial, standard deviation 3.8); with the caller's flag followed, all 300 were.
    expect(untrusted.length).toBeGreaterThan(0);
    expect(untrusted.length).toBeLessThan(60);
    // Those traced are in the caller's trace, beneath the caller's span.
    for (const span of untrusted) expect(span.parentSpanId).toBe(CALLER_SPAN);
    expect(requestSpans('bb')).toHaveLength(40);
    expect(requestSpans('cc')).toEqual([]);
    // Traced or not, each request's log line names the caller's trace.
    const loggedTraces = server
      .output()
      .split('\n')
      .filter((line) => line.startsWith('{') && line.includes('"msg":"request"'))
      .map((line) => (JSON.parse(line) as { trace_id?: string }).trace_id);
    expect(new Set(loggedTraces.filter((traceId) => traceId?.startsWith('aa'))).size).toBe(300);
  });
});
