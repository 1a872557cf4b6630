import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { assertRedisUp } from '../../harness/redis.js';
import { eventually } from './eventually.js';
import { freePort } from '../../harness/free-port.js';

/** The Redis the suite may use; tests that need it are skipped without it. */
export const REDIS_URL = process.env.REDIS_URL || undefined;

/** Settings of an instance that limits in the suite's Redis, under a prefix of its own. */
export const redisStoreEnv = () => ({ REDIS_URL: REDIS_URL!, REDIS_KEY_PREFIX: `test:${randomUUID()}:` });

/** A rate-limit store a test runs with, and the settings that choose it; Redis ones need REDIS_URL. */
export interface StoreVariant {
  name: string;
  usesRedis: boolean;
  env: () => Record<string, string>;
}

export const RATE_LIMIT_STORES: StoreVariant[] = [
  { name: 'memory', usesRedis: false, env: () => ({}) },
  { name: 'redis', usesRedis: true, env: redisStoreEnv },
];

/** A Redis server of a test's own on a free port, which it may stop and start again. */
export async function startRedis() {
  const port = await freePort();
  const url = `redis://127.0.0.1:${port}`;
  let child: ChildProcess | undefined;
  const start = async () => {
    child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
    await eventually(() =>
      assertRedisUp(url).then(
        () => true,
        () => false,
      ),
    );
  };
  const stop = async () => {
    const exited = new Promise((resolve) => child!.once('exit', resolve));
    child!.kill('SIGKILL');
    await exited;
  };
  await start();
  return { url, start, stop };
}
