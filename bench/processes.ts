import { execFileSync, spawn } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from '../test/support/free-port.js';

/** How a server is started: node with these arguments, in the repository root. */
export interface ServerSpec {
  name: string;
  nodeArgs: string[];
  env: Record<string, string>;
  /** Answers 2xx once the server can take load. */
  readyPath: string;
}

export interface RunningServer {
  name: string;
  origin: string;
  logFile: string;
  /** Throws when the server has exited without being asked to (crashed, or killed by something else on the machine). */
  assertRunning(): void;
  /** CPU time (user and system) the server process has used so far, from /proc: unlike req/s, hardly moved by other load on the machine. */
  cpuSeconds(): number;
  /** Resident set size of the server process now, from /proc. */
  rssBytes(): number;
  /** SIGTERM, then SIGKILL if it has not exited within the grace period; resolves to the exit code. */
  stop(): Promise<number | null>;
}

/** The repository root: servers are started from it, as `npm start` would. */
export const ROOT = fileURLToPath(new URL('..', import.meta.url));

const START_TIMEOUT_MS = 60_000;
const STOP_GRACE_MS = 15_000;

let clockTicks: number | undefined;
const clockTicksPerSecond = () => (clockTicks ??= Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' })));

/**
 * Starts a server as a child process of its own (never in the load generator's process), its
 * stdout and stderr in logDir/<name>.log, with production settings; resolves once it is ready.
 */
export async function startServer(spec: ServerSpec, logDir: string): Promise<RunningServer> {
  const port = await freePort();
  const origin = `http://127.0.0.1:${port}`;
  const logFile = join(logDir, `${spec.name}.log`);
  const log = openSync(logFile, 'w');
  const child = spawn(process.execPath, spec.nodeArgs, {
    cwd: ROOT,
    env: { ...process.env, NODE_ENV: 'production', LOG_LEVEL: 'info', HOST: '127.0.0.1', PORT: String(port), ...spec.env },
    stdio: ['ignore', log, log],
  });
  closeSync(log);
  let exitCode: number | null | undefined;
  let exitReason = '';
  let stopping = false;
  const exited = new Promise<number | null>((resolve) =>
    child.once('exit', (code, signal) => {
      exitReason = signal ? `was killed by ${signal}` : `exited with ${code}`;
      resolve((exitCode = code ?? 128));
    }),
  );
  const logTail = () => readFileSync(logFile, 'utf8').split('\n').slice(-20).join('\n');

  const failure = (why: string) => {
    child.kill('SIGKILL');
    return new Error(`${spec.name} ${why}; the end of ${logFile}:\n${logTail()}`);
  };
  const deadline = Date.now() + START_TIMEOUT_MS;
  for (;;) {
    if (exitCode !== undefined) throw failure(`${exitReason} before it was ready`);
    if (Date.now() > deadline) throw failure(`was not ready within ${START_TIMEOUT_MS / 1000} s`);
    const ready = await fetch(origin + spec.readyPath).then((response) => response.ok, () => false);
    if (ready) break;
    await sleep(100);
  }

  return {
    name: spec.name,
    origin,
    logFile,
    assertRunning() {
      if (exitCode !== undefined && !stopping) {
        throw new Error(`${spec.name} ${exitReason} in the middle of the run; the end of ${logFile}:\n${logTail()}`);
      }
    },
    cpuSeconds: () => {
      // Fields 14 and 15 of /proc/PID/stat, counted after the command name, which may contain spaces.
      const fields = readFileSync(`/proc/${child.pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
      return (Number(fields[11]) + Number(fields[12])) / clockTicksPerSecond();
    },
    rssBytes: () => {
      const match = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'));
      return Number(match![1]) * 1024;
    },
    async stop() {
      stopping = true;
      if (exitCode !== undefined) return exitCode;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), STOP_GRACE_MS);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}

/** Compiles the service, so `ours` is exactly what `npm start` runs. */
export async function buildService(): Promise<void> {
  const build = spawn('npm', ['run', '--silent', 'build'], { cwd: ROOT, stdio: 'inherit' });
  const code = await new Promise<number | null>((resolve) => build.once('exit', resolve));
  if (code !== 0) throw new Error(`npm run build exited with ${code}`);
}
