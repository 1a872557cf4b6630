#!/usr/bin/env node
// Replays the Dockerfile without Docker (no engine runs on CI machines): each stage gets a
// directory standing for its filesystem, COPY copies from the build context (minus
// .dockerignore) or from an earlier stage, RUN runs in WORKDIR with the stage's ENV. Then the
// final stage's CMD is started as the image would start it, and checked over HTTP: /healthz,
// /readyz, the HEALTHCHECK command, the keys command, one authenticated request, and a clean
// exit on SIGTERM. A broken step of the Dockerfile fails this script, and so CI.
//
// Usage: node .ci/rehearse-dockerfile.mjs   (needs DATABASE_URL and REDIS_URL)
import { spawn, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer } from 'node:net';
import { basename, join, relative } from 'node:path';

const context = process.cwd();
const root = mkdtempSync(join(tmpdir(), 'image-'));
let server;
const fail = (message) => {
  console.error(`rehearse-dockerfile: ${message}`);
  server?.kill('SIGKILL');
  process.exit(1);
};

/** A loopback port nobody listens on now: a server left over from another run must not answer for this one. */
async function freePort() {
  const probe = createServer();
  await new Promise((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address();
  await new Promise((resolve) => probe.close(resolve));
  return String(port);
}

/** Instructions, continuation lines joined, comments and blank lines dropped. */
function instructions(text) {
  const lines = text.replace(/\\\r?\n/g, ' ').split(/\r?\n/);
  return lines
    .map((line) => line.trim())
    .filter((line) => line && !line.startsWith('#'))
    .map((line) => {
      const [, keyword, rest] = line.match(/^(\S+)\s*(.*)$/);
      return { keyword: keyword.toUpperCase(), rest };
    });
}

const ignored = existsSync('.dockerignore')
  ? readFileSync('.dockerignore', 'utf8').split('\n').map((line) => line.trim()).filter((line) => line && !line.startsWith('#'))
  : [];
const isIgnored = (path) => {
  const rel = relative(context, path);
  return ignored.some((pattern) => {
    const regex = new RegExp(`^${pattern.replace(/\./g, '\\.').replace(/\*/g, '[^/]*')}(/|$)`);
    return regex.test(rel) || regex.test(basename(rel));
  });
};

const stages = [];
let stage;
const inStage = (path) => join(stage.root, path.startsWith('/') ? path : join(stage.workdir, path));

for (const { keyword, rest } of instructions(readFileSync('Dockerfile', 'utf8'))) {
  switch (keyword) {
    case 'FROM': {
      const name = rest.match(/\sAS\s+(\S+)/i)?.[1] ?? String(stages.length);
      stage = { name, root: join(root, name), workdir: '/', env: {}, cmd: undefined, healthcheck: undefined };
      mkdirSync(stage.root, { recursive: true });
      stages.push(stage);
      console.log(`== stage ${name} (${rest.split(/\s/)[0]})`);
      break;
    }
    case 'WORKDIR':
      stage.workdir = rest.startsWith('/') ? rest : join(stage.workdir, rest);
      mkdirSync(inStage('.'), { recursive: true });
      break;
    case 'ENV':
      for (const [, key, value] of rest.matchAll(/(\w+)=("[^"]*"|\S+)/g)) stage.env[key] = value.replace(/^"|"$/g, '');
      break;
    case 'COPY': {
      const words = rest.split(/\s+/);
      const from = words.find((word) => word.startsWith('--from='))?.slice('--from='.length);
      const paths = words.filter((word) => !word.startsWith('--'));
      const rawDestination = paths.pop();
      const destination = inStage(rawDestination);
      const intoDirectory = paths.length > 1 || rawDestination.endsWith('/') || rawDestination === '.';
      const source = from ? stages.find((candidate) => candidate.name === from) : undefined;
      if (from && !source) fail(`COPY --from=${from}: no such stage`);
      for (const path of paths) {
        const origin = source ? join(source.root, path) : join(context, path);
        if (!existsSync(origin)) fail(`COPY ${path}: not found`);
        // Like Docker: a directory's contents land in the destination; a file lands inside it when it is a directory.
        const target = intoDirectory && !statSync(origin).isDirectory() ? join(destination, basename(origin)) : destination;
        cpSync(origin, target, { recursive: true, filter: (file) => source !== undefined || !isIgnored(file) });
      }
      break;
    }
    case 'RUN': {
      console.log(`RUN ${rest}`);
      const result = spawnSync('sh', ['-c', rest], { cwd: inStage('.'), env: { ...process.env, ...stage.env }, stdio: 'inherit' });
      if (result.status !== 0) fail(`RUN ${rest}: exit ${result.status}`);
      break;
    }
    case 'CMD':
      stage.cmd = JSON.parse(rest);
      break;
    case 'HEALTHCHECK':
      stage.healthcheck = JSON.parse(rest.slice(rest.indexOf('CMD') + 3).trim());
      break;
    default: // USER, EXPOSE, LABEL: nothing to replay
  }
}

const image = stages.at(-1);
if (!image.cmd || image.cmd[0] !== 'node') fail('the final stage needs an exec-form CMD that runs node');
if (!image.healthcheck) fail('the final stage needs a HEALTHCHECK');
if (existsSync(join(image.root, 'app/node_modules/typescript'))) fail('dev dependencies reached the final stage');

const port = await freePort();
const metricsPort = await freePort();
// A Redis key prefix of its own: key ids start at 1 in every database, and Redis outlives them.
const env = {
  ...process.env,
  ...image.env,
  PORT: port,
  METRICS_PORT: metricsPort,
  HOST: '127.0.0.1',
  METRICS_HOST: '127.0.0.1',
  REDIS_KEY_PREFIX: `rehearsal:${process.pid}:${Date.now()}:`,
};
const cwd = join(image.root, image.workdir);
const run = (command) => {
  const result = spawnSync(command[0], command.slice(1), { cwd, env, encoding: 'utf8' });
  if (result.status !== 0) fail(`${command.join(' ')}: exit ${result.status}\n${result.stderr}`);
  return result.stdout;
};

console.log('== starting the image: migrate, then CMD');
run(['node', 'dist/cli/migrate.js']);
server = spawn(image.cmd[0], image.cmd.slice(1), { cwd, env, stdio: ['ignore', 'inherit', 'inherit'] });
const exited = new Promise((resolve) => server.once('exit', resolve));
const origin = `http://127.0.0.1:${port}`;
for (let attempt = 0; ; attempt++) {
  if ((await fetch(`${origin}/healthz`).catch(() => undefined))?.ok) break;
  if (attempt > 100) fail('/healthz never answered');
  await new Promise((resolve) => setTimeout(resolve, 200));
}
if (!(await fetch(`${origin}/readyz`)).ok) fail('/readyz is not ready');
run(image.healthcheck);
const key = run(['node', 'dist/cli/keys.js', 'create', '--plan', 'free', '--name', 'rehearsal']).trim().split('\n').at(-1);
let status;
for (let attempt = 0; attempt < 50 && status !== 200; attempt++) {
  status = (await fetch(`${origin}/v1/pets`, { headers: { authorization: `Bearer ${key}` } })).status;
  if (status !== 200) await new Promise((resolve) => setTimeout(resolve, 100));
}
if (status !== 200) fail(`an authenticated GET /v1/pets answered ${status}`);
if (!(await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).ok) fail('metrics are not served');
server.kill('SIGTERM');
const code = await exited;
if (code !== 0) fail(`the server exited with ${code} on SIGTERM`);
console.log('rehearse-dockerfile: the image builds, starts, answers and stops cleanly');
