import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test as base, describe, expect } from 'vitest';
import { createTestDatabase, POSTGRES_URL } from '../support/databases.js';
import { eventually } from '../support/eventually.js';
import { freePort } from '../../harness/free-port.js';
import { parseCommandLine } from '../../src/cli/keys/commands.js';
import { run, runCommand, startServer, type ServerProcess } from '../../harness/processes.js';
import { bearer, KEY } from '../support/keys.js';
import { minuteAndDay } from '../../src/plans/limits.js';

/** The command as the npm script runs it once dist/ is current (the suite's global setup builds it), and as docs/api-keys.md shows it called in an image. */
const keys = (args: string[], env: Record<string, string>) => run(['dist/cli/keys.js', ...args], env);

/** The command exactly as scripts call it (npm's own warnings about this machine's npmrc aside): npm adds two processes to each run. */
async function keysThroughNpm(args: string[], env: Record<string, string>) {
  const result = await runCommand('npm', ['run', '--silent', 'keys', '--', ...args], env);
  return { ...result, stderr: result.stderr.replace(/^npm warn .*\n/gm, '') };
}

/** Parses a command line as the command does before it opens anything: its exit code, or 'runs' when it parsed, and what it printed. */
function parsed(args: string[]) {
  const lines = { stdout: '', stderr: '' };
  const run = parseCommandLine(args, { out: (line) => (lines.stdout += `${line}\n`), err: (line) => (lines.stderr += `${line}\n`) });
  return { code: typeof run === 'number' ? run : 'runs', ...lines };
}

/** The documented format: psk_, 43 random base62 characters and a 6-character CRC32 checksum. */
/** Admin tokens: the same format with their own prefix, so a scanner tells the two apart. */
const ADMIN_TOKEN = /^psa_[0-9A-Za-z]{49}$/;
const lastLine = (text: string) => text.trimEnd().split('\n').at(-1)!;
/** For a test that runs the command many times: each run opens the database, seconds apiece on a loaded machine with PGlite. */
const MANY_RUNS = { timeout: 180_000 };

/** A server with its admin listener. */
type Running = ServerProcess & { admin: string };

async function startWithAdmin(env: Record<string, string>): Promise<Running> {
  const adminPort = await freePort();
  const server = await startServer({ env: { ...env, ADMIN_PORT: String(adminPort) } });
  return Object.assign(server, { admin: `http://127.0.0.1:${adminPort}/admin/v1` });
}

/**
 * The settings of a database of the file's own, for the command; the compiled code is built first.
 * On the embedded database a server holds it for the whole file, as it would beside a developer's
 * `npm start`, so the commands are answered by that server; one test runs the command without it.
 */
const test = base
  // eslint-disable-next-line no-empty-pattern -- vitest reads a fixture's dependencies from this pattern
  .extend('database', { scope: 'file' }, async ({}, { onCleanup }): Promise<Record<string, string>> => {
    // The command runs the compiled code: build what is being tested, when src/ is newer (as the script does).
    expect((await runCommand('npm', ['run', '--silent', 'build:stale'])).code).toBe(0);
    // A create costs 5 units: a key's own limits must hold that much (the server's setting, or the command's own).
    const costs = { RATE_LIMIT_COSTS: 'createPet=5' };
    if (POSTGRES_URL) {
      const database = await createTestDatabase();
      await database.db.close();
      onCleanup(database.drop);
      return { DATABASE_URL: database.url!, ...costs };
    }
    const dataDir = await mkdtemp(join(tmpdir(), 'pets-keys-'));
    onCleanup(() => rm(dataDir, { recursive: true, force: true }));
    return { DATABASE_URL: '', DATA_DIR: dataDir, ...costs };
  })
  .extend('server', { scope: 'file' }, async ({ database }, { onCleanup }): Promise<Running | undefined> => {
    if (POSTGRES_URL) return undefined;
    const server = await startWithAdmin(database);
    onCleanup(async () => void (await server.stop()));
    return server;
  })
  .extend('env', { scope: 'file' }, ({ database, server }) => {
    if (!POSTGRES_URL) expect(server).toBeDefined();
    return database;
  });

// The file's setup (dist/ built when src/ is newer, a database, a server holding it) is no test's
// work: resolved in a fixture, it is charged to the first test's 60 s, which tsc and a start on PGlite
// overrun together on a loaded machine. Done before the tests, unbounded: each part ends on its own
// (startServer gives up on a server that never gets ready).
test.beforeAll(async ({ env }) => void env, 0);

const listJson = async (env: Record<string, string>) =>
  JSON.parse((await keys(['list', '--json'], env)).stdout) as Array<Record<string, unknown>>;

describe('npm run --silent keys', () => {
  test.for([['--help'], ['help'], ['-h']])('%s lists the commands and exits 0', async (args, { env }) => {
    const help = await (args[0] === '--help' ? keysThroughNpm : keys)(args, env);
    expect(help).toMatchObject({ code: 0, stderr: '' });
    for (const command of ['create', 'rotate', 'list', 'revoke', 'admin-token create', 'admin-token list', 'admin-token revoke']) {
      expect(help.stdout).toContain(`keys ${command}`);
    }
  });

  test('create prints the key as the last line of stdout and exits 0', async ({ env }) => {
    const created = await keysThroughNpm(['create', '--plan', 'free', '--name', 'ci script'], env);
    expect(created).toMatchObject({ code: 0, stderr: '' });
    expect(lastLine(created.stdout)).toMatch(KEY);

    const enterprise = await keys(['create', '--plan', 'enterprise', '--per-minute', '5', '--per-day', '50'], env);
    expect(enterprise.code).toBe(0);
    expect(lastLine(enterprise.stdout)).toMatch(KEY);
  });

  test('list shows one line per key, id first, and never a key or a hash', async ({ env }) => {
    const created = await keys(['create', '--plan', 'pro', '--name', 'listed'], env);
    const key = lastLine(created.stdout);
    const listed = await keys(['list'], env);
    expect(listed.code).toBe(0);
    const lines = listed.stdout.trimEnd().split('\n');
    const records = await listJson(env);
    expect(lines).toHaveLength(records.length);
    expect(lines.map((line) => Number(line.split('\t')[0]))).toEqual(records.map((record) => record.id));
    // The state is the admin API's, the last column's first word.
    expect(lines.map((line) => line.split('\t').at(-1)!.split(/[ ,]/)[0])).toEqual(records.map((record) => record.state));
    expect(lines.find((line) => line.includes('listed'))).toMatch(
      /^\d+\tlisted\tpro\t300\/minute\t10000\/day\tread-write\t\S+\tno expiry\tactive$/,
    );
    for (const output of [listed.stdout, JSON.stringify(records)]) {
      expect(output).not.toContain(key);
      expect(output).not.toMatch(/psk_|[0-9a-f]{64}|hash/i);
    }
  });

  test('list --json prints the same keys as a JSON array', async ({ env }) => {
    const records = await listJson(env);
    expect(records.find((record) => record.plan === 'enterprise')).toMatchObject({
      id: expect.any(Number),
      name: '',
      plan: 'enterprise',
      limits: minuteAndDay(5, 50),
      perMinute: 5,
      perDay: 50,
      readOnly: false,
      createdAt: expect.any(String),
      expiresAt: null,
      revokedAt: null,
      replacedBy: null,
    });
  });

  test('revoke marks the key revoked; an unknown id is an error', async ({ env }) => {
    const id = (await listJson(env))[0]!.id as number;
    const revoked = await keys(['revoke', String(id)], env);
    expect(revoked.code).toBe(0);
    expect((await listJson(env))[0]!.revokedAt).toEqual(expect.any(String));
    expect((await keys(['revoke', String(id)], env)).code).toBe(0);
    const missing = await keys(['revoke', '999999'], env);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('999999');
  });

  test('create --expires-at and --read-only are listed with the key', async ({ env }) => {
    const created = await keys(
      ['create', '--plan', 'free', '--name', 'reader', '--read-only', '--expires-at', '2099-01-31T12:00:00Z'],
      env,
    );
    expect(created.code).toBe(0);
    expect(lastLine(created.stdout)).toMatch(KEY);
    expect((await listJson(env)).find((record) => record.name === 'reader')).toMatchObject({
      readOnly: true,
      expiresAt: '2099-01-31T12:00:00.000Z',
    });
    const line = (await keys(['list'], env)).stdout.split('\n').find((text) => text.includes('\treader\t'));
    expect(line).toMatch(/\tread-only\t\S+\texpires 2099-01-31T12:00:00.000Z\tactive$/);
  });

  test(
    'rotate prints a new key with the same plan, limits, name and scope, and lists which key replaced which',
    MANY_RUNS,
    async ({ env }) => {
      await keys(['create', '--plan', 'enterprise', '--per-minute', '7', '--per-day', '70', '--name', 'rolled', '--read-only'], env);
      const old = (await listJson(env)).find((record) => record.name === 'rolled')!;
      const rotated = await keys(['rotate', String(old.id), '--overlap-seconds', '3600'], env);
      expect(rotated).toMatchObject({ code: 0, stderr: '' });
      expect(lastLine(rotated.stdout)).toMatch(KEY);
      const records = await listJson(env);
      const replaced = records.find((record) => record.id === old.id)!;
      const successor = records.find((record) => record.id === replaced.replacedBy)!;
      expect(successor).toMatchObject({
        name: 'rolled',
        plan: 'enterprise',
        perMinute: 7,
        perDay: 70,
        readOnly: true,
        expiresAt: null,
        revokedAt: null,
      });
      expect(Date.parse(replaced.expiresAt as string) - Date.now()).toBeGreaterThan(3_500_000);
      expect(replaced.revokedAt).toBeNull();
      const line = (await keys(['list'], env)).stdout.split('\n').find((text) => text.startsWith(`${String(old.id)}\t`));
      expect(line).toMatch(new RegExp(`\\trotated, replaced by ${String(successor.id)}$`));
      // Rotating it again, or a revoked key, is refused; --overlap-seconds 0 revokes the old key at once.
      expect((await keys(['rotate', String(old.id)], env)).code).toBe(1);
      const now = await keys(['rotate', String(successor.id), '--overlap-seconds', '0'], env);
      expect(now.code).toBe(0);
      expect((await listJson(env)).find((record) => record.id === successor.id)!.revokedAt).toEqual(expect.any(String));
      expect((await keys(['rotate', '999999'], env)).code).toBe(1);
    },
  );

  test('revoke takes with it the keys rotated into the revoked one that still work', MANY_RUNS, async ({ env, server }) => {
    const old = lastLine((await keys(['create', '--plan', 'pro', '--name', 'cancelled'], env)).stdout);
    const id = (await listJson(env)).find((record) => record.name === 'cancelled')!.id as number;
    expect((await keys(['rotate', String(id), '--overlap-seconds', '2592000'], env)).code).toBe(0);
    const successorId = (await listJson(env)).find((record) => record.id === id)!.replacedBy as number;
    // On the embedded database, the server the commands go through has the old key in use.
    const status = () => fetch(`${server!.origin}/v1/pets`, { headers: bearer(old) }).then((response) => response.status);
    if (server) expect(await status()).toBe(200);

    expect(await keys(['revoke', String(successorId)], env)).toMatchObject({ code: 0, stderr: '' });
    const records = await listJson(env);
    for (const revoked of [id, successorId]) expect(records.find((record) => record.id === revoked)!.state).toBe('revoked');
    if (server) await eventually(async () => (await status()) === 401, 1_000);
  });

  test(
    'bad arguments, an --expires-at not on the calendar among them (where Date would roll it over): one line on stderr, exit 2, nothing written',
    MANY_RUNS,
    async ({ env }) => {
      const cases = [
        [],
        ['rotate'],
        ['create'],
        ['create', '--plan', 'Gold'],
        ['create', '--plan'],
        ['create', '--plan', 'enterprise', '--per-minute', '0', '--per-day', '10'],
        ['create', '--plan', 'enterprise', '--per-minute', 'ten', '--per-day', '10'],
        ['create', '--plan', 'enterprise', '--per-minute', '1.5', '--per-day', '10'],
        ['create', '--plan', 'free', '--colour', 'red'],
        ['create', '--plan', 'free', 'extra'],
        ['create', '--plan', 'free', '--name', 'tab\there'],
        ['list', '--plan', 'free'],
        ['revoke'],
        ['revoke', 'abc'],
        ['revoke', '1', '2'],
        ['create', '--plan', 'free', '--expires-at', 'tomorrow'],
        ['create', '--plan', 'free', '--expires-at', '2027-01-01'],
        ['create', '--plan', 'free', '--expires-at', '2020-01-01T00:00:00Z'],
        ['create', '--plan', 'free', '--read-only', 'yes'],
        ['create', '--plan', 'free', '--overlap-seconds', '5'],
        ['rotate', 'abc'],
        ['rotate', '1', '--overlap-seconds', '-1'],
        ['rotate', '1', '--overlap-seconds', '1.5'],
        ['rotate', '1', '--read-only'],
        ['list', '--expires-at', '2030-01-01T00:00:00Z'],
        ['admin-token'],
        ['admin-token', 'rotate', '1'],
        ['admin-token', 'create'],
        ['admin-token', 'create', '--scope', 'read'],
        ['admin-token', 'create', '--scope', 'admin', '--name', 'x'],
        ['admin-token', 'create', '--scope', 'write', '--name', 'x', '--plan', 'free'],
        ['admin-token', 'create', '--scope', 'write', '--name', 'tab\there'],
        ['admin-token', 'list', '--scope', 'read'],
        ['admin-token', 'revoke'],
        ['admin-token', 'revoke', 'abc'],
        ['rotate', '1', '--overlap-seconds', '2592001'],
      ];
      const offCalendar = [
        ['create', '--plan', 'free', '--expires-at', '2099-02-31T00:00:00Z'],
        ['create', '--plan', 'free', '--expires-at', '2099-01-01T24:00:00Z'],
        ['rotate', '1', '--expires-at', '2099-04-31T00:00:00+02:00'],
      ];
      // Bad arguments are refused by the parser, before anything is opened: each case is parsed as the
      // command parses it, and two of them run as the process, whose one line and exit code come from it.
      for (const args of [...cases, ...offCalendar]) {
        const label = JSON.stringify(args);
        const result = parsed(args);
        expect(result.code, label).toBe(2);
        expect(result.stdout, label).toBe('');
        expect(result.stderr.trimEnd().split('\n'), label).toHaveLength(1);
        expect(result.stderr, label).toMatch(offCalendar.includes(args) ? /^keys: --expires-at .*calendar/ : /^keys: /);
      }
      const before = await listJson(env);
      const sample = [cases[3]!, offCalendar[0]!];
      const processes = await Promise.all(sample.map((args) => keys(args, env)));
      processes.forEach((result, i) => expect(result).toEqual({ code: 2, stdout: '', stderr: parsed(sample[i]!).stderr }));
      expect(await listJson(env)).toEqual(before);
    },
  );

  test('bad arguments are refused in the words of the admin API, whose schemas check them', () => {
    const refusals: Array<[string[], string]> = [
      [['create', '--plan', 'Gold'], '--plan must be a lower-case letter then up to 31 lower-case letters, digits, _ or -'],
      [['create'], '--plan is required and must be a lower-case letter then up to 31 lower-case letters, digits, _ or -'],
      [
        ['create', '--plan', 'enterprise', '--per-minute', '007', '--per-day', '10'],
        '--per-minute must be an integer from 1 to 2147483647',
      ],
      [['rotate', '1', '--overlap-seconds', '2592001'], '--overlap-seconds must be an integer from 0 to 2592000'],
      [
        ['create', '--plan', 'free', '--name', 'tab\there'],
        '--name must be empty or 1 to 200 characters, one of them visible, without control characters, bidi overrides or lone surrogates',
      ],
      [
        ['admin-token', 'create', '--scope', 'read', '--name', '\u3164\u200b'],
        '--name must be 1 to 200 characters, one of them visible, without control characters, bidi overrides or lone surrogates',
      ],
      [
        ['rotate', '1', '--expires-at', '2027-01-01'],
        '--expires-at must be an ISO 8601 date-time with a time zone, such as 2027-01-31T00:00:00Z',
      ],
      [['revoke', '9007199254740992'], 'the key id must be an integer from 1 to 9007199254740991'],
      [
        ['create', '--plan', 'free', '--expires-at', '9999-12-31T23:59:59-14:00'],
        '--expires-at must be no later than 9999-12-31T23:59:59Z',
      ],
      // The admin API's words: body/allowedOrigins/1 there, --allowed-origin here.
      [
        ['create', '--plan', 'free', '--allowed-origin', 'https://shop.example.com', '--allowed-origin', 'https://A.com'],
        '--allowed-origin "https://A.com" is not an origin as browsers send it; write "https://a.com"',
      ],
      [
        ['create', '--plan', 'free', '--allowed-origin', 'https://a.com:443'],
        '--allowed-origin "https://a.com:443" is not an origin as browsers send it; write "https://a.com"',
      ],
      [
        ['create', '--plan', 'free', '--allowed-origin', 'https://a.com/'],
        '--allowed-origin must be a web origin, scheme://host[:port], as browsers send it in Origin',
      ],
      [
        ['create', '--plan', 'free', '--allowed-origin', 'not a URL'],
        '--allowed-origin must be a web origin, scheme://host[:port], as browsers send it in Origin',
      ],
      [
        ['create', '--plan', 'free', '--allowed-origin', 'https://a.com', '--allowed-origin', 'https://a.com'],
        '--allowed-origin repeats "https://a.com": each origin is listed once',
      ],
      [
        ['create', '--plan', 'free', ...Array.from({ length: 21 }, (_, i) => ['--allowed-origin', `https://shop${i}.example.com`]).flat()],
        '--allowed-origin must be a list of 1 to 20 web origins, or null',
      ],
      [['rotate', '1', '--allowed-origin', 'https://a.com'], "--allowed-origin does not apply to 'rotate'"],
    ];
    for (const [args, message] of refusals) {
      const result = parsed(args);
      expect(result.code, message).toBe(2);
      expect(result.stderr.split('. usage: ')[0], message).toBe(`keys: ${message}`);
    }
  });
  test(
    'limits below what an operation costs, a plan not in the table, a plan without limits and none given: one line naming the option, exit 2, nothing written',
    MANY_RUNS,
    async ({ env }) => {
      const before = await listJson(env);
      for (const [args, message] of [
        [
          ['create', '--plan', 'enterprise', '--per-minute', '4', '--per-day', '100'],
          '--per-minute is 4, less than the 5 units createPet costs (RATE_LIMIT_COSTS): a key with it could never call it',
        ],
        // The admin API's words: body/plan there, --plan here.
        [['create', '--plan', 'gold'], '--plan is gold, which names no plan'],
        [
          ['create', '--plan', 'enterprise'],
          'the enterprise plan has no limits of its own: a key of it needs limits (or perMinute and perDay)',
        ],
      ] as const) {
        const result = await keys([...args], env);
        expect(result, message).toMatchObject({ code: 2, stdout: '' });
        expect(result.stderr.trimEnd().split('\n')).toHaveLength(1);
        expect(result.stderr.split('. usage: ')[0]).toBe(`keys: ${message}`);
      }
      expect(await listJson(env)).toEqual(before);
    },
  );

  test('--allowed-origin, repeated, binds the key to those origins: listed with it, and on /v1 served from them only', async ({
    env,
    server,
  }) => {
    const shop = 'https://shop.example.com';
    const dev = 'http://localhost:5173';
    const created = await keys(
      ['create', '--plan', 'free', '--read-only', '--name', 'storefront', '--allowed-origin', shop, '--allowed-origin', dev],
      env,
    );
    expect(created).toMatchObject({ code: 0, stderr: '' });
    const key = lastLine(created.stdout);
    const records = await listJson(env);
    expect(records.find((record) => record.name === 'storefront')).toMatchObject({ allowedOrigins: [shop, dev], readOnly: true });
    // Keys made without it may be used from any origin.
    expect(records.filter((record) => record.name !== 'storefront').every((record) => record.allowedOrigins === null)).toBe(true);
    // On the embedded database, the server the command went through serves the key at once.
    if (server) {
      const status = async (origin: string) =>
        (await fetch(`${server.origin}/v1/pets?limit=1`, { headers: { ...bearer(key), origin } })).status;
      expect(await status(dev)).toBe(200);
      expect(await status('https://copycat.example')).toBe(403);
    }
  });

  test('--per-minute on a key of any plan replaces its plan’s minute with a window of its own', async ({ env }) => {
    const created = await keys(['create', '--plan', 'free', '--per-minute', '10', '--name', 'own minute'], env);
    expect(created.code).toBe(0);
    expect((await listJson(env)).find((record) => record.name === 'own minute')).toMatchObject({
      plan: 'free',
      limits: minuteAndDay(10, 1_000),
      perMinute: 10,
      perDay: 1_000,
    });
  });

  test('a command, option or argument it does not know is repeated quoted, with its ESC sequences and newlines escaped', async ({
    env,
  }) => {
    // Parsed as the command parses them; the first also run as the process, whose stderr is the terminal's.
    const refusals: Array<[string[], string]> = [
      [['\u001b[2J\u001b[31mcreate'], 'unknown command "\\u001b[2J\\u001b[31mcreate"'],
      [['admin-token', 'x\u001b]0;owned\u0007'], 'unknown command "admin-token x\\u001b]0;owned\\u0007"'],
      [['create', '--plan', 'free', '--\u001b[8m'], 'unknown option "--\\u001b[8m"'],
      // A group of short options: the first one unknown is named.
      [['list', '-\u009b2J'], 'unknown option "-\\u009b"'],
      [['list', '--x\nkeys: forged'], 'unknown option "--x\\nkeys: forged"'],
      [['create', '--plan', 'free', 'line\r\nkeys: forged\u202e'], 'unexpected argument "line\\r\\nkeys: forged\\u202e"'],
      // An origin the rules refuse, repeated in their words (quoted as JSON, which leaves a C1 CSI as it is).
      [
        ['create', '--plan', 'free', '--allowed-origin', 'https://a\u009b2J.com'],
        '--allowed-origin "https://a\\u009b2J.com" is not a web origin (scheme://host[:port])',
      ],
    ];
    const results = refusals.map(([args]) => parsed(args));
    expect(await keys(refusals[0]![0], env)).toEqual({ ...results[0], code: 2 });
    results.forEach((result, i) => {
      const [args, message] = refusals[i]!;
      const label = JSON.stringify(args);
      expect(result.code, label).toBe(2);
      expect(result.stdout, label).toBe('');
      expect(result.stderr.split('. usage: ')[0], label).toBe(`keys: ${message}`);
      // Nothing a terminal acts on: no C0 or C1 control, no bidi embedding, override or isolate.
      expect(result.stderr.trimEnd(), label).not.toMatch(/[\p{Cc}\u202a-\u202e\u2066-\u2069]/u);
    });
  });
});

describe('npm run --silent keys -- admin-token', () => {
  test(
    'create prints the token last; list shows it, never the secret; revoke revokes; a server with ADMIN_PORT takes it, and the trail has every change',
    MANY_RUNS,
    async ({ env, server: running }) => {
      const created = await keys(['admin-token', 'create', '--scope', 'write', '--name', 'billing'], env);
      expect(created).toMatchObject({ code: 0, stderr: '' });
      const token = lastLine(created.stdout);
      expect(token).toMatch(ADMIN_TOKEN);
      const support = lastLine((await keys(['admin-token', 'create', '--scope', 'read', '--name', 'support'], env)).stdout);
      expect(support).toMatch(ADMIN_TOKEN);

      const records = JSON.parse((await keys(['admin-token', 'list', '--json'], env)).stdout) as Array<Record<string, unknown>>;
      const billing = records.find((record) => record.name === 'billing')!;
      expect(billing).toEqual({ id: expect.any(Number), name: 'billing', scope: 'write', createdAt: expect.any(String), revokedAt: null });
      const listed = (await keys(['admin-token', 'list'], env)).stdout;
      expect(listed).toMatch(new RegExp(`^${String(billing.id)}\\tbilling\\twrite\\t\\S+\\tactive$`, 'm'));
      expect(listed + JSON.stringify(records)).not.toMatch(/psa_|hash/);

      const supportId = records.find((record) => record.name === 'support')!.id as number;
      expect((await keys(['admin-token', 'revoke', String(supportId)], env)).code).toBe(0);
      const revoked = JSON.parse((await keys(['admin-token', 'list', '--json'], env)).stdout) as Array<Record<string, unknown>>;
      expect(revoked.find((record) => record.id === supportId)!.revokedAt).toEqual(expect.any(String));
      const missing = await keys(['admin-token', 'revoke', '999999'], env);
      expect(missing.code).toBe(1);
      expect(missing.stderr).toContain('999999');

      await keys(['create', '--plan', 'free', '--name', 'by the command'], env);
      const keyId = (await listJson(env)).find((record) => record.name === 'by the command')!.id as number;
      expect((await keys(['revoke', String(keyId)], env)).code).toBe(0);
      // On the embedded database, the server the commands went through; on PostgreSQL, one started now.
      const server = running ?? (await startWithAdmin(env));
      try {
        const { admin } = server;
        const audit = await fetch(`${admin}/audit?limit=100`, { headers: bearer(token) });
        expect(audit.status).toBe(200);
        const actions = ((await audit.json()) as Array<{ action: string; actor: string; adminTokenId: number | null }>).map(
          (entry) => `${entry.action} ${entry.actor} ${entry.adminTokenId}`,
        );
        // The keys command's changes are its own: no admin token.
        expect(actions).toEqual(
          expect.arrayContaining([
            'admin_token.create cli:keys null',
            'admin_token.revoke cli:keys null',
            'key.create cli:keys null',
            'key.revoke cli:keys null',
          ]),
        );
        expect((await fetch(`${admin}/keys/${keyId}`, { headers: bearer(support) })).status).toBe(401);
        // The admin API is on its own port only.
        expect((await fetch(`${server.origin}/admin/v1/keys`, { headers: bearer(token) })).status).toBe(404);
      } finally {
        if (!running) expect(await server.stop()).toBe(0);
      }
    },
  );
});

describe.runIf(!POSTGRES_URL)('on the embedded database', () => {
  test('goes through the server that holds the data directory: a key it creates works at once, one it revokes stops at once', async ({
    env,
    server,
  }) => {
    const created = await keys(['create', '--plan', 'free', '--name', 'beside a server'], env);
    expect(created).toMatchObject({ code: 0, stderr: '' });
    const key = lastLine(created.stdout);
    expect(key).toMatch(KEY);
    const status = () => fetch(`${server!.origin}/v1/pets`, { headers: bearer(key) }).then((response) => response.status);
    expect(await status()).toBe(200);

    const id = (await listJson(env)).find((record) => record.name === 'beside a server')!.id as number;
    expect(await keys(['revoke', String(id)], env)).toMatchObject({ code: 0, stderr: '' });
    expect(await status()).toBe(401);
    // Log lines are written in batches, within 100 ms.
    await eventually(async () => /"command":"revoke","exitCode":0,"msg":"keys command"/.test(server!.output()));
  });

  test('opens the database itself when no server holds it', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'pets-keys-alone-'));
    try {
      const alone = { DATABASE_URL: '', DATA_DIR: dataDir };
      const created = await keys(['create', '--plan', 'pro', '--name', 'no server'], alone);
      expect(created).toMatchObject({ code: 0, stderr: '' });
      expect(await listJson(alone)).toEqual([expect.objectContaining({ name: 'no server', plan: 'pro' })]);
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});

describe.runIf(POSTGRES_URL)('two servers sharing one PostgreSQL', () => {
  test('a key revoked through the command stops working on both within a second', async ({ env }) => {
    const servers = await Promise.all([startServer({ env }), startServer({ env })]);
    try {
      const key = lastLine((await keys(['create', '--plan', 'free', '--name', 'two servers'], env)).stdout);
      const id = (await listJson(env)).find((record) => record.name === 'two servers')!.id as number;
      const status = (origin: string) => fetch(`${origin}/v1/pets`, { headers: bearer(key) }).then((response) => response.status);
      for (const server of servers) await eventually(async () => (await status(server.origin)) === 200);

      expect((await keys(['revoke', String(id)], env)).code).toBe(0);
      await Promise.all(servers.map((server) => eventually(async () => (await status(server.origin)) === 401, 1_000)));
    } finally {
      await Promise.all(servers.map((server) => server.stop()));
    }
  });
});
