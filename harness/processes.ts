import { execFileSync, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { closeSync, mkdtempSync, openSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { freePort } from './free-port.js';

/** The repository root: servers and commands run from it, as `npm start` runs the service. */
export const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** How a server is started. */
export interface ServerSpec {
  /** Names the server in errors and its log file. */
  name?: string;
  /** Node's arguments; by default the built entry point, as `npm start` runs it (SERVICE_NODE_ARGS). */
  nodeArgs?: string[];
  /** On top of this process's environment and the defaults below. */
  env?: Record<string, string>;
  /** Answers 2xx once the server can take load. */
  readyPath?: string;
  /** Where <name>.log goes; a temporary directory by default. */
  logDir?: string;
  /** Standard output a pipe whose reader is gone from the start (as after `| head`): every write to it fails; stderr still goes to the log file. */
  stdoutClosed?: boolean;
}

export interface ServerProcess {
  name: string;
  /** The server's process id (the benchmark attaches strace to it). */
  pid: number;
  origin: string;
  logFile: string;
  /** Everything the process has printed so far, stdout and stderr. */
  output(): string;
  /** Throws when the server has exited without being asked to (crashed, or killed by something else). */
  assertRunning(): void;
  /** CPU time (user and system) the process has used so far, from /proc: hardly moved by other load on the machine. */
  cpuSeconds(): number;
  /** The part of it spent in the kernel on the process's behalf (its system calls: socket and file writes, above all). */
  systemCpuSeconds(): number;
  /** Resident set size of the process now, from /proc. */
  rssBytes(): number;
  /** Sends the signal (SIGKILL after the grace period); resolves to the exit code, null when killed by a signal. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

const START_TIMEOUT_MS = 60_000;

/**
 * How the tests run the service's entry points (dist/, kept current by the suite's global setup):
 * V8's baseline WASM compiler alone, since each lives seconds, not hours (docs/api-keys.md).
 */
export const SERVICE_NODE_ARGS = ['--liftoff-only', '--enable-source-maps'];
const STOP_GRACE_MS = 15_000;

let clockTicks: number | undefined;
const clockTicksPerSecond = () => (clockTicks ??= Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' })));

/** Fields 14 and 15 of /proc/PID/stat (user and system time, in clock ticks), counted after the command name, which may contain spaces. */
function cpuTicksOf(pid: number): { user: number; system: number } {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return { user: Number(fields[11]), system: Number(fields[12]) };
}

/**
 * Starts a server as a process of its own on a free loopback port, its output in a log file, and
 * resolves once readyPath answers. Tests, the benchmark and CI start every server this way.
 */
export async function startServer(spec: ServerSpec = {}): Promise<ServerProcess> {
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    try {
      return await startOn(spec, port);
    } catch (error) {
      // The port was free when asked for, then taken before the server bound it (an ephemeral
      // port is any outgoing connection's to take meanwhile): a fresh one, a few times at most.
      const taken = (error as Error).message.includes(`Cannot listen on 127.0.0.1:${port}: the port is in use`);
      if (!taken || attempt === PORT_ATTEMPTS) throw error;
    }
  }
}

/** How many fresh ports a start is tried on when the one it was given was taken before the server bound it. */
const PORT_ATTEMPTS = 3;

async function startOn(spec: ServerSpec, port: number): Promise<ServerProcess> {
  const name = spec.name ?? 'server';
  const origin = `http://127.0.0.1:${port}`;
  const logFile = join(spec.logDir ?? mkdtempSync(join(tmpdir(), 'pets-server-')), `${name}.log`);
  const log = openSync(logFile, 'w');
  const child = spawn(process.execPath, spec.nodeArgs ?? [...SERVICE_NODE_ARGS, 'dist/server.js'], {
    cwd: ROOT,
    env: {
      ...process.env,
      DATABASE_URL: '',
      HOST: '127.0.0.1',
      PORT: String(port),
      // Several servers run at once; each takes a free metrics port.
      METRICS_PORT: '0',
      LOG_LEVEL: 'info',
      // Key ids repeat across databases; their rate-limit counts in a shared Redis must not.
      REDIS_KEY_PREFIX: `test:${randomUUID()}:`,
      // No balancer to wait for: a SIGTERM closes at once, unless a test of the drain sets it.
      SHUTDOWN_DRAIN_MS: '0',
      // A loaded machine stalls event loops for seconds; only the tests of load shedding shed. Off, not
      // merely high: under-pressure reads a second without a sample of the loop (a start on a busy
      // machine) as an infinite lag, and sheds the first requests of tests whatever the threshold.
      LOAD_SHED_EVENT_LOOP_DELAY_MS: '0',
      ...spec.env,
    },
    stdio: ['ignore', spec.stdoutClosed ? 'pipe' : log, log],
  });
  closeSync(log);
  child.stdout?.destroy();
  const output = () => readFileSync(logFile, 'utf8');
  let exitCode: number | null | undefined;
  let stopping = false;
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve((exitCode = code))));
  const failure = (why: string) => {
    child.kill('SIGKILL');
    return new Error(`${name} ${why}; its output:\n${output().split('\n').slice(-30).join('\n')}`);
  };

  const deadline = Date.now() + START_TIMEOUT_MS;
  for (;;) {
    if (exitCode !== undefined) throw failure(`exited with ${exitCode} before it was ready`);
    if (Date.now() > deadline) throw failure(`was not ready within ${START_TIMEOUT_MS / 1000} s`);
    const ready = await fetch(origin + (spec.readyPath ?? '/healthz')).then(
      (response) => response.ok,
      () => false,
    );
    if (ready) break;
    await sleep(50);
  }

  return {
    name,
    pid: child.pid!,
    origin,
    logFile,
    output,
    assertRunning() {
      if (exitCode !== undefined && !stopping) throw failure(`exited with ${exitCode} in the middle of the run`);
    },
    cpuSeconds() {
      const { user, system } = cpuTicksOf(child.pid!);
      return (user + system) / clockTicksPerSecond();
    },
    systemCpuSeconds() {
      return cpuTicksOf(child.pid!).system / clockTicksPerSecond();
    },
    rssBytes() {
      const match = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'));
      return Number(match![1]) * 1024;
    },
    async stop(signal = 'SIGTERM') {
      stopping = true;
      if (exitCode !== undefined) return exitCode;
      child.kill(signal);
      const timer = setTimeout(() => child.kill('SIGKILL'), STOP_GRACE_MS);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}

/** Runs a command to completion and returns its exit code and what it printed. */
export async function runCommand(command: string, args: string[], env: Record<string, string> = {}) {
  const child = spawn(command, args, { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => child.once('close', resolve));
  return { code, stdout, stderr };
}

/** Runs a built entry point of this project (`dist/server.js`, `dist/cli/keys.js`). */
export const run = (args: string[], env: Record<string, string> = {}) => runCommand(process.execPath, [...SERVICE_NODE_ARGS, ...args], env);
