import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ServerProcess } from '../harness/processes.js';

/** The system calls a process writes with: Node writes sockets with write and writev, pino its log with write. */
export const WRITE_CALLS = ['write', 'writev', 'sendmsg', 'sendto'] as const;

/**
 * Where a write went: a client's connection (the response), the server's log file, another socket
 * (PostgreSQL, Redis, the OTLP collector), or anything else (libuv's eventfd wake-ups, pipes).
 */
export const WRITE_TARGETS = ['client', 'log', 'otherSockets', 'other'] as const;
export type WriteTarget = (typeof WRITE_TARGETS)[number];

/** The write system calls a server made while it answered a fixed number of requests. */
export interface WriteCount {
  responses: number;
  /** By where they went. */
  byTarget: Record<WriteTarget, number>;
  /** The client socket's, by system call: whether a response leaves in one writev or in two writes shows here. */
  clientByCall: Record<string, number>;
}

/** A line of `strace -f -yy` that starts a write: `PID  writev(23<TCP:[127.0.0.1:4567->127.0.0.1:54746]>, ...`. */
const WRITE_LINE = new RegExp(`^\\d+\\s+(${WRITE_CALLS.join('|')})\\(\\d+<(.*?)>,`);
/** The local port of a TCP socket as -yy shows it, IPv4 or IPv6. */
const LOCAL_PORT = /^TCP6?:\[.*?:(\d+)->/;

/**
 * Counts the writes in strace's output by target. The server's own connections are the sockets
 * whose local port is the one it listens on; its log is the file its standard output goes to.
 * Lines that resume an interrupted call (`<... write resumed>`) are not new calls and do not match.
 */
export function countWriteLines(
  straceOutput: string,
  server: { port: number; logFile: string },
): Pick<WriteCount, 'byTarget' | 'clientByCall'> {
  const byTarget = Object.fromEntries(WRITE_TARGETS.map((target) => [target, 0])) as Record<WriteTarget, number>;
  const clientByCall: Record<string, number> = {};
  for (const line of straceOutput.split('\n')) {
    const match = WRITE_LINE.exec(line);
    if (!match) continue;
    const [, call, descriptor] = match as unknown as [string, string, string];
    const localPort = LOCAL_PORT.exec(descriptor)?.[1];
    let target: WriteTarget;
    if (localPort === String(server.port)) {
      target = 'client';
      clientByCall[call] = (clientByCall[call] ?? 0) + 1;
    } else if (localPort !== undefined || descriptor.startsWith('UNIX') || descriptor.startsWith('socket:')) target = 'otherSockets';
    else if (descriptor === server.logFile) target = 'log';
    else target = 'other';
    byTarget[target]++;
  }
  return { byTarget, clientByCall };
}

/**
 * Attaches strace to the running server (every thread: pino and libuv may write from any), runs
 * `during` (which sends requests and resolves to the number of responses), detaches, and counts
 * the writes by target. strace stops the server at every system call while attached: what it
 * counts is exact, how fast it goes meanwhile is not a measurement.
 */
export async function countWrites(server: ServerProcess, during: () => Promise<number>): Promise<WriteCount> {
  const dir = mkdtempSync(join(tmpdir(), 'pets-bench-strace-'));
  const output = join(dir, 'strace.out');
  try {
    const strace = spawn(
      'strace',
      ['-f', '-yy', '-s', '0', '-e', `trace=${WRITE_CALLS.join(',')}`, '-e', 'signal=none', '-o', output, '-p', String(server.pid)],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let stderr = '';
    const exited = new Promise<number | null>((resolve, reject) => {
      strace.once('error', reject);
      strace.once('exit', resolve);
    });
    // strace says so on stderr once it holds every thread; requests sent before would go uncounted.
    await new Promise<void>((resolve, reject) => {
      strace.stderr.on('data', (chunk: Buffer) => {
        stderr += chunk.toString();
        if (stderr.includes(`Process ${server.pid} attached`)) resolve();
      });
      exited.then(
        (code) => reject(new Error(`strace exited with ${code} before it attached: ${stderr.trim()}`)),
        (error: Error) => reject(new Error(`strace could not start: ${error.message}`)),
      );
    });
    let responses: number;
    try {
      responses = await during();
    } finally {
      // SIGINT: strace detaches from every thread and leaves the server running as before.
      strace.kill('SIGINT');
      await exited;
    }
    const counted = countWriteLines(readFileSync(output, 'utf8'), {
      port: Number(new URL(server.origin).port),
      logFile: realpathSync(server.logFile),
    });
    return { responses, ...counted };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Writes per response of each target. */
export const perResponse = (count: WriteCount, target: WriteTarget) => count.byTarget[target] / Math.max(1, count.responses);
