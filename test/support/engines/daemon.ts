import { spawn, execFileSync } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import { chown, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from '../../../harness/free-port.js';

/**
 * What the engine harnesses share: a daemon run in the foreground as a child of the test (so its
 * PID is the engine's and a SIGKILL is a crash), a temporary directory per engine, and the user a
 * PostgreSQL-side daemon runs as when the tests run as root.
 */

/** Keeps a daemon's last output for failure messages, not all of it. */
const OUTPUT_LIMIT = 64 * 1024;

export interface Daemon {
  /** Names it in errors. */
  readonly name: string;
  readonly pid: number;
  /** Resolves once the process has exited, to its exit code (null when a signal ended it). */
  readonly exited: Promise<number | null>;
  running(): boolean;
  /** What it printed lately (stdout and stderr). */
  output(): string;
  /** Sends the signal, then SIGKILL after graceMs; resolves once it has exited. */
  stop(signal?: NodeJS.Signals, graceMs?: number): Promise<void>;
}

/** Every daemon still running, and every engine directory: killed and removed when the test process exits, however it exits. */
const live = new Set<Daemon>();
const dirs = new Set<string>();
let exitHookInstalled = false;
function cleanUpOnExit() {
  for (const daemon of live) {
    try {
      process.kill(daemon.pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
}
function installExitHook() {
  if (exitHookInstalled) return;
  process.once('exit', cleanUpOnExit);
  exitHookInstalled = true;
}

export interface SpawnOptions {
  cwd: string;
  /** Runs it as this user (when the tests run as root and the daemon refuses root). */
  user?: { uid: number; gid: number };
}

/** Starts a daemon in the foreground (it must not daemonize itself, or its PID is not the engine's). */
export function spawnDaemon(name: string, command: string, args: string[], options: SpawnOptions): Daemon {
  const child = spawn(command, args, { cwd: options.cwd, stdio: ['ignore', 'pipe', 'pipe'], ...(options.user ?? {}) });
  let output = '';
  const keep = (chunk: Buffer) => {
    output += chunk.toString();
    if (output.length > OUTPUT_LIMIT) output = output.slice(-OUTPUT_LIMIT / 2);
  };
  child.stdout.on('data', keep);
  child.stderr.on('data', keep);
  let done = false;
  const exited = new Promise<number | null>((resolve) => {
    child.once('exit', (code) => {
      done = true;
      live.delete(daemon);
      resolve(code);
    });
    // spawn failures (no such binary) end here rather than with an exit.
    child.once('error', (error) => {
      output += `\n${error.message}`;
      done = true;
      live.delete(daemon);
      resolve(null);
    });
  });
  const daemon: Daemon = {
    name,
    pid: child.pid ?? -1,
    exited,
    running: () => !done,
    output: () => output,
    async stop(signal: NodeJS.Signals = 'SIGTERM', graceMs = 5_000) {
      if (done) return;
      child.kill(signal);
      if (signal !== 'SIGKILL') {
        const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
        await exited;
        clearTimeout(timer);
      }
      await exited;
    },
  };
  live.add(daemon);
  installExitHook();
  return daemon;
}

/**
 * Polls until check() holds; fails early, with the daemons' output, when one of them has exited,
 * and with the last error check() threw when time runs out. Resolves to the milliseconds it took.
 */
export async function waitFor(
  what: string,
  check: () => Promise<boolean>,
  { timeoutMs = 20_000, daemons = [] as Daemon[], intervalMs = 50 } = {},
): Promise<number> {
  const started = Date.now();
  let lastError: unknown;
  for (;;) {
    const dead = daemons.find((daemon) => !daemon.running());
    if (dead) throw new Error(`${what}: ${dead.name} (pid ${dead.pid}) exited:\n${dead.output()}`);
    try {
      if (await check()) return Date.now() - started;
      lastError = undefined;
    } catch (error) {
      lastError = error;
    }
    if (Date.now() - started > timeoutMs) {
      const outputs = daemons.map((daemon) => `--- ${daemon.name} (pid ${daemon.pid}):\n${daemon.output().slice(-4_000)}`).join('\n');
      throw new Error(
        `${what}: not within ${timeoutMs} ms${lastError ? ` (last error: ${lastError instanceof Error ? lastError.message : JSON.stringify(lastError)})` : ''}\n${outputs}`,
        {
          cause: lastError,
        },
      );
    }
    await sleep(intervalMs);
  }
}

/** Runs a command to its end; its output, or an error with it when it fails. */
export async function runCommand(command: string, args: string[], options: SpawnOptions): Promise<string> {
  const child = spawn(command, args, { cwd: options.cwd, stdio: ['ignore', 'pipe', 'pipe'], ...(options.user ?? {}) });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => {
    child.once('exit', resolve);
    child.once('error', (error) => {
      output += error.message;
      resolve(null);
    });
  });
  if (code !== 0) throw new Error(`${command} ${args.join(' ')} exited with ${code}:\n${output}`);
  return output;
}

/** The postgres user's ids when the tests run as root (initdb, postgres and pgbouncer refuse root). */
export function postgresUser(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
  const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
  return { uid, gid };
}

/** A fresh temporary directory for one engine, owned by user when given. */
export async function engineDir(prefix: string, user?: { uid: number; gid: number }) {
  const path = await mkdtemp(join(tmpdir(), `pets-${prefix}-`));
  if (user) await chown(path, user.uid, user.gid);
  dirs.add(path);
  installExitHook();
  return {
    path,
    async remove() {
      await rm(path, { recursive: true, force: true, maxRetries: 3 });
      dirs.delete(path);
    },
  };
}

/** A program from PATH or the sbin directories (pgbouncer is in /usr/sbin, which PATH may lack). */
export function findProgram(name: string): string | undefined {
  const dirs = [...(process.env.PATH ?? '').split(':').filter(Boolean), '/usr/sbin', '/usr/local/sbin', '/sbin'];
  return dirs.map((dir) => join(dir, name)).find((path) => existsSync(path));
}

export function requireProgram(name: string, hint = 'run .ci/install-engines.sh'): string {
  const path = findProgram(name);
  if (!path) throw new Error(`${name} is not installed (${hint})`);
  return path;
}

/** Several ports nobody listens on now, distinct from each other (freePort alone may repeat one). */
export async function freePorts(count: number): Promise<number[]> {
  const ports = new Set<number>();
  while (ports.size < count) ports.add(await freePort());
  return [...ports];
}

/**
 * Runs start with fresh free ports, again (up to 3 times) when a port was taken meanwhile by
 * someone else: freePort() only says a port was free a moment ago.
 */
export async function withFreshPorts<T>(count: number, start: (ports: number[]) => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    const ports = await freePorts(count);
    try {
      return await start(ports);
    } catch (error) {
      if (attempt >= 3 || !/address already in use/i.test(String(error))) throw error;
    }
  }
}
