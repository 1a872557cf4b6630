import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort } from '../harness/free-port.js';
import { developmentKey } from './support/keys.js';
import { ROOT, run, startServer } from '../harness/processes.js';

/** A fenced shell block of the docs, with the HTML comment right above it. */
interface ShellBlock {
  file: string;
  line: number;
  marker: string | undefined;
  code: string;
}

const THIS_TEST = 'test/docs.test.ts';

function markdownFiles(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((entry) => {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory()) return markdownFiles(path);
    return entry.name.endsWith('.md') ? [path] : [];
  });
}

function shellBlocks(file: string): ShellBlock[] {
  const lines = readFileSync(join(ROOT, file), 'utf8').split('\n');
  const blocks: ShellBlock[] = [];
  for (let i = 0; i < lines.length; i++) {
    const fence = /^```(\w*)$/.exec(lines[i]!);
    if (!fence) continue;
    const end = lines.indexOf('```', i + 1);
    if (['sh', 'bash', 'shell'].includes(fence[1]!)) {
      const marker = /^<!-- (.+) -->$/.exec(lines[i - 1] ?? '')?.[1];
      blocks.push({ file, line: i + 1, marker, code: lines.slice(i + 1, end).join('\n') });
    }
    i = end;
  }
  return blocks;
}

const blocks = ['README.md', 'client/README.md', ...markdownFiles('docs')].flatMap(shellBlocks);
const blockOf = (file: string, includes: string) => {
  const found = blocks.filter((block) => block.file === file && block.code.includes(includes));
  expect(found, `one shell block of ${file} with ${includes}`).toHaveLength(1);
  return found[0]!;
};
const ran = new Set<ShellBlock>();

/** The block's commands, one per line: continuations joined, comments dropped. */
const commandLines = (code: string) =>
  code
    .replace(/\\\n\s*/g, '')
    .split('\n')
    .map((line) => line.replace(/\s+#\s.*$/, '').trim())
    .filter((line) => line !== '' && !line.startsWith('#'));

/** Each simple command's program, and for programs with subcommands the first plain word after it. */
function programs(code: string): string[] {
  return commandLines(code)
    .flatMap((line) => line.split(/&&|\|\||\||;/))
    .map((part) => {
      const words = part
        .trim()
        .replace(/^\w+=\$\(/, '')
        .split(/\s+/)
        .filter((word) => !/^\w+=/.test(word));
      if (words[0] === 'docker' && words[1] === 'compose') words.splice(0, 2, 'docker-compose');
      const [program, ...args] = words;
      const subcommand = ['npm', 'docker-compose', 'kubectl'].includes(program!)
        ? args.find((word) => /^[a-z][a-z-]*$/.test(word))
        : undefined;
      return subcommand ? `${program} ${subcommand}` : program!;
    });
}

/** Runs one command line through bash with the variables given, as a reader pastes it. */
function bash(line: string, variables: Record<string, string>) {
  const assignments = Object.entries(variables).map(([name, value]) => `${name}='${value}'`);
  return execFileSync('bash', ['-c', [...assignments, line].join('\n')], {
    cwd: ROOT,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

/** A curl -i answer, split: status, headers (lower-case names), body. */
function answer(text: string) {
  const [head, ...rest] = text.split('\r\n\r\n');
  const [statusLine, ...headerLines] = head!.split('\r\n');
  const headers = Object.fromEntries(
    headerLines.map((header) => [header.slice(0, header.indexOf(':')).toLowerCase(), header.slice(header.indexOf(':') + 1).trim()]),
  );
  return { status: Number(statusLine!.split(' ')[1]), headers, body: rest.join('\r\n\r\n') };
}

/**
 * A session block: its variable lines (NAME=value) are replaced by the values given, and each
 * curl command runs with them (and with the variables set by earlier command substitutions); its
 * answer must have the status its comment starts with. Returns the answers, in order.
 */
function runSession(block: ShellBlock, variables: Record<string, string>, origins: Record<string, string>) {
  const substitute = (text: string) => Object.entries(origins).reduce((done, [from, to]) => done.replaceAll(from, to), text);
  const lines = block.code.replace(/\\\n\s*/g, '').split('\n');
  const answers: ReturnType<typeof answer>[] = [];
  const captured: string[] = [];
  lines.forEach((line, index) => {
    const variable = /^(\w+)=(\S+)/.exec(line);
    if (variable && !line.includes('$(')) {
      expect(Object.keys(variables), `${block.file}:${block.line} sets ${variable[1]}`).toContain(variable[1]);
      return;
    }
    if (variable) {
      captured.push(substitute(line));
      return;
    }
    if (!line.startsWith('curl ')) return;
    const expected = /^# (\d{3})\b/.exec(lines[index + 1] ?? '')?.[1];
    const got = answer(bash([...captured, substitute(line)].join('\n'), variables));
    expect(got.status, `${line}\n${got.body}`).toBe(Number(expected));
    answers.push(got);
  });
  ran.add(block);
  return answers;
}

/**
 * One `npm run --silent keys -- ...` line, its single-quoted words unquoted, on the given embedded
 * database: its words run as the script runs them once dist/ is current (the keys command's test
 * calls the script itself), for npm adds two processes to each.
 */
function keysCommand(line: string, dataDir: string) {
  const words = line.match(/'[^']*'|\S+/g)!.map((word) => word.replace(/^'(.*)'$/, '$1'));
  expect(words.slice(0, 5)).toEqual(['npm', 'run', '--silent', 'keys', '--']);
  return run(['dist/cli/keys.js', ...words.slice(5)], { DATABASE_URL: '', DATA_DIR: dataDir });
}

/** Runs every command of a block of keys commands; each must succeed. Returns their outputs. */
async function runKeysBlock(block: ShellBlock, dataDir: string) {
  const outputs: string[] = [];
  for (const line of commandLines(block.code)) {
    const { code, stdout, stderr } = await keysCommand(line, dataDir);
    expect(code, `${line}\n${stderr}`).toBe(0);
    outputs.push(stdout);
  }
  ran.add(block);
  return outputs;
}

const tempDirs: string[] = [];
const tempDir = () => {
  const dir = mkdtempSync(join(tmpdir(), 'pets-docs-'));
  tempDirs.push(dir);
  return dir;
};
afterAll(() => tempDirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })));

describe('the shell blocks of README.md, client/README.md and docs/', () => {
  it('each says what runs it: this test, a CI script that runs its commands, or why nothing can', () => {
    expect(blocks.length).toBeGreaterThan(0);
    for (const block of blocks) {
      const where = `${block.file}:${block.line}`;
      const runBy = /^run by (\S+)$/.exec(block.marker ?? '')?.[1];
      if (runBy === THIS_TEST) continue;
      if (runBy) {
        expect(existsSync(join(ROOT, runBy)), `${where}: ${runBy} exists`).toBe(true);
        const script = readFileSync(join(ROOT, runBy), 'utf8');
        for (const command of programs(block.code)) {
          const [program, subcommand] = command.split(' ');
          const pattern = new RegExp(`(^|[\\s($"])${program}\\s.*\\b${subcommand ?? ''}`, 'm');
          expect(pattern.test(script), `${where}: ${runBy} runs ${command}`).toBe(true);
        }
        continue;
      }
      expect(block.marker, `${where} names what runs it, <!-- run by FILE --> or <!-- not run: why -->`).toMatch(/^not run: \S.{10,}/);
    }
  });

  it("the README's curl session, on a first start of the embedded database", async () => {
    const server = await startServer({ name: 'docs-readme', env: { DATA_DIR: 'memory://' } });
    try {
      const key = await developmentKey(server);
      const block = blockOf('README.md', 'curl ');
      const publicBase = 'http://127.0.0.1:3000';
      const [created, listed, fetched, revalidated, keyed] = runSession(block, { KEY: key }, { [publicBase]: server.origin });
      expect(created!.headers.location).toBe(`${server.origin}/v1/pets/1`);
      expect(JSON.parse(created!.body)).toEqual({ id: 1, name: 'Rex', categoryId: 1, status: 'available' });
      expect(JSON.parse(listed!.body)).toEqual([{ id: 1, name: 'Rex', categoryId: 1, status: 'available' }]);
      expect(fetched!.headers).toMatchObject({ deprecation: '@1764892800', sunset: 'Thu, 05 Dec 2030 00:00:00 GMT' });
      expect(fetched!.headers.etag).toMatch(/^"/);
      expect(revalidated!.body).toBe('');
      // The ETAG= line's read counted; the 304 did not. The session runs on the real clock: where a
      // new minute began between the two, the day's window (in the RateLimit field) tells instead.
      const left = (response: typeof fetched, window: 'minute' | 'day') =>
        Number(new RegExp(`"${window}";r=(\\d+)`).exec(String(response!.headers.ratelimit))![1]);
      const window = revalidated!.headers['x-ratelimit-reset'] === fetched!.headers['x-ratelimit-reset'] ? 'minute' : 'day';
      expect(left(revalidated, window)).toBe(left(fetched, window) - 1);
      expect(JSON.parse(keyed!.body)).toMatchObject({ id: 2 });

      const retry = commandLines(block.code).find((line) => line.includes('Idempotency-Key'))!;
      const replayed = answer(bash(retry.replaceAll(publicBase, server.origin), { KEY: key }));
      expect(replayed.status).toBe(201);
      expect(replayed.headers['idempotent-replayed']).toBe('true');
      expect(replayed.body).toBe(keyed!.body);
    } finally {
      await server.stop();
    }
  });

  it('the keys command example of docs/api-keys.md', async () => {
    const outputs = await runKeysBlock(blockOf('docs/api-keys.md', 'keys -- create'), tempDir());
    const lastLines = outputs.map((output) => output.trim().split('\n').at(-1)!);
    for (const created of [0, 1, 2, 3]) expect(lastLines[created]).toMatch(/^psk_[0-9A-Za-z]{49}$/);
    const list = outputs.at(-1)!.trim().split('\n');
    expect(list).toHaveLength(4);
    expect(list[0]).toMatch(/^1\tcustomer 4711\tpro\t.*\trotated, replaced by 4$/);
    expect(list[2]).toMatch(/^3\tdashboard\tfree\t.*read-only.*revoked /);
  });

  it("the admin tokens and the admin API's session of docs/admin-api.md", async () => {
    const dataDir = tempDir();
    const outputs = await runKeysBlock(blockOf('docs/admin-api.md', 'admin-token create'), dataDir);
    const [billing, support] = outputs.map((output) => output.trim().split('\n').at(-1)!);
    expect(billing).toMatch(/^psa_[0-9A-Za-z]{49}$/);
    expect(support).toMatch(/^psa_[0-9A-Za-z]{49}$/);
    expect(outputs[2]!.trim().split('\n')).toHaveLength(2);

    const adminPort = await freePort();
    const server = await startServer({ name: 'docs-admin', env: { DATA_DIR: dataDir, ADMIN_PORT: String(adminPort) } });
    try {
      await developmentKey(server);
      const block = blockOf('docs/admin-api.md', 'curl ');
      const variables = { ADMIN: billing!, SUPPORT: support!, A: `http://127.0.0.1:${adminPort}/admin/v1` };
      const answers = runSession(block, variables, {});
      expect(JSON.parse(answers[0]!.body)).toMatchObject({ id: 1, externalId: 'cus_4711', name: 'Acme Corp' });
      expect(JSON.parse(answers[1]!.body)).toMatchObject({ id: 2, plan: 'pro', customerId: 1, key: expect.stringMatching(/^psk_/) });
      expect(JSON.parse(answers.at(-2)!.body)[0]).toMatchObject({ action: 'key.revoke', keyId: 2 });
    } finally {
      await server.stop();
    }
  });

  it.runIf(existsSync('/usr/bin/kubectl') || existsSync('/usr/local/bin/kubectl'))('the kustomize renders of docs/deploying.md', () => {
    const block = blockOf('docs/deploying.md', 'kubectl kustomize');
    for (const line of commandLines(block.code)) expect(bash(line, {})).toMatch(/kind: Deployment/);
    ran.add(block);
  });

  it.runIf(existsSync('/usr/bin/kubectl') || existsSync('/usr/local/bin/kubectl'))('every block marked as run by this test was run', () => {
    const marked = blocks.filter((block) => block.marker === `run by ${THIS_TEST}`);
    expect(marked.filter((block) => !ran.has(block)).map((block) => `${block.file}:${block.line}`)).toEqual([]);
  });
});
