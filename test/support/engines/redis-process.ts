import { Redis } from 'ioredis';
import { requireProgram, spawnDaemon, waitFor } from './daemon.js';

export const HOST = '127.0.0.1';

/** One command on a connection of its own, closed after: works whatever became of the others. */
export async function redisCommand(port: number, args: (string | number)[], password?: string): Promise<unknown> {
  const redis = new Redis({
    host: HOST,
    port,
    password,
    lazyConnect: true,
    connectTimeout: 1_000,
    commandTimeout: 2_000,
    maxRetriesPerRequest: 0,
    enableOfflineQueue: false,
    retryStrategy: () => null,
  });
  redis.on('error', () => {});
  try {
    await redis.connect();
    const [command, ...rest] = args;
    return await redis.call(String(command), ...rest);
  } finally {
    redis.disconnect();
  }
}

/** The fields of an INFO reply, by name. */
export function infoFields(reply: unknown): Record<string, string> {
  return Object.fromEntries(
    String(reply)
      .split(/\r?\n/)
      .map((line) => line.split(':'))
      .filter((parts): parts is [string, string] => parts.length === 2),
  );
}

/**
 * Settings of every redis-server here: loopback, nothing written to disk but what a mode needs, and
 * a replica's first sync at once (Redis 7 waits 5 s for more replicas to share a diskless sync).
 */
export function baseRedisArgs(port: number, dir: string, password?: string): string[] {
  const args = [
    '--port',
    String(port),
    '--bind',
    HOST,
    '--dir',
    dir,
    '--save',
    '',
    '--appendonly',
    'no',
    '--daemonize',
    'no',
    '--repl-diskless-sync-delay',
    '0',
  ];
  if (password) args.push('--requirepass', password, '--masterauth', password);
  return args;
}

/** Starts redis-server with these arguments and waits until it answers PING. */
export async function startRedisServer(
  name: string,
  args: string[],
  { port, dir, password }: { port: number; dir: string; password?: string },
) {
  const daemon = spawnDaemon(name, requireProgram('redis-server'), args, { cwd: dir });
  try {
    await waitFor(`${name} answers PING`, async () => (await redisCommand(port, ['PING'], password)) === 'PONG', { daemons: [daemon] });
  } catch (error) {
    await daemon.stop('SIGKILL');
    throw error;
  }
  return daemon;
}
