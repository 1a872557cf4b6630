import type { FastifyInstance } from 'fastify';
import { chmod, rm } from 'node:fs/promises';
import { connect, createServer, type Socket } from 'node:net';
import { join } from 'node:path';
import type { Output } from './command.js';
import { runKeysCommand } from './commands.js';
import { createAdminTokensRepository } from '../../admin/tokens-repository.js';

/**
 * The embedded database admits one process, the server; the keys command run beside it sends its
 * command line here and prints the answer. The socket sits in the data directory, readable and
 * writable by its owner only: whoever may use it could open the database files anyway.
 */
export const keysSocketPath = (dataDir: string) => join(dataDir, 'keys.sock');

export interface KeysAnswer {
  lines: Array<['out' | 'err', string]>;
  exitCode: number;
}

/** A command line is a few hundred bytes; anything longer is not one. */
const MAX_REQUEST_BYTES = 64 * 1024;

/** Serves the keys command on the socket at `path`; resolves to a function that stops serving. */
export async function serveKeysCommands(app: FastifyInstance, path: string): Promise<() => Promise<void>> {
  const repositories = { keys: app.apiKeysRepository, rules: app.keyRules, tokens: createAdminTokensRepository(app.db) };
  const server = createServer((socket) => void answer(socket));

  async function answer(socket: Socket) {
    const argv = await readRequest(socket);
    if (!argv) return void socket.destroy();
    const lines: KeysAnswer['lines'] = [];
    const output: Output = { out: (line) => lines.push(['out', line]), err: (line) => lines.push(['err', line]) };
    let exitCode: number;
    try {
      exitCode = await runKeysCommand(argv, repositories, output);
    } catch (error) {
      app.log.error({ err: error, command: argv[0] }, 'keys command failed');
      lines.push(['err', `keys: failed: ${(error as Error).message}`]);
      exitCode = 1;
    }
    app.log.info({ command: argv.slice(0, argv[0] === 'admin-token' ? 2 : 1).join(' '), exitCode }, 'keys command');
    socket.end(`${JSON.stringify({ lines, exitCode } satisfies KeysAnswer)}\n`);
  }

  try {
    // This process holds the data directory's lock, so a socket left there is a dead server's.
    await rm(path, { force: true });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(path, resolve);
    });
    await chmod(path, 0o600);
  } catch (error) {
    // A path longer than a socket's (about 100 bytes), say: the server runs, the command cannot reach it.
    app.log.warn({ err: error, path }, 'the keys command cannot reach this server: stop it to run the command');
    return async () => {};
  }
  return () => new Promise<void>((resolve) => server.close(() => resolve()));
}

/** The command line, once its line has arrived; undefined for anything that is not one. */
function readRequest(socket: Socket): Promise<string[] | undefined> {
  return new Promise((resolve) => {
    let text = '';
    const done = (argv: string[] | undefined) => {
      socket.off('data', onData);
      resolve(argv);
    };
    const onData = (chunk: Buffer) => {
      text += String(chunk);
      if (text.length > MAX_REQUEST_BYTES) return done(undefined);
      if (text.includes('\n')) done(commandLine(text));
    };
    socket.on('data', onData);
    socket.once('end', () => done(undefined));
    socket.once('error', () => done(undefined));
  });
}

function commandLine(text: string): string[] | undefined {
  try {
    const { argv } = JSON.parse(text) as { argv?: unknown };
    return Array.isArray(argv) && argv.every((arg) => typeof arg === 'string') ? argv : undefined;
  } catch {
    return undefined;
  }
}

/** Sends a command line to the server that holds the data directory; undefined when none listens there. */
export function askRunningServer(path: string, argv: string[]): Promise<KeysAnswer | undefined> {
  return new Promise((resolve, reject) => {
    const socket = connect(path);
    let text = '';
    socket.on('connect', () => socket.write(`${JSON.stringify({ argv })}\n`));
    socket.on('data', (chunk) => (text += String(chunk)));
    socket.on('end', () => {
      try {
        resolve(JSON.parse(text) as KeysAnswer);
      } catch {
        reject(new Error('the server holding the embedded database gave no answer'));
      }
    });
    socket.on('error', (error: NodeJS.ErrnoException) =>
      error.code === 'ENOENT' || error.code === 'ECONNREFUSED' ? resolve(undefined) : reject(error),
    );
  });
}
