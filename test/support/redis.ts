import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { assertRedisUp } from '../../harness/redis.js';
import { createRedisClient } from '../../src/rate-limit/stores/redis-connection.js';
import { RedisStore } from '../../src/rate-limit/stores/redis-store.js';
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

/** The ban of the stores tests open themselves: far off, so that only what a test decides refuses. */
const TEST_BAN = { threshold: 30, durationMs: 60_000 };

/**
 * A RedisStore as the service opens one (createRedisClient: failing fast, no queue) on the Redis at
 * `url`, under a prefix of its own; not yet connected. A URL where nothing listens gives a store
 * whose every command fails at once, as while Redis is unreachable.
 */
export const redisStoreAt = (url: string, prefix = redisStoreEnv().REDIS_KEY_PREFIX, now?: () => number) =>
  new RedisStore(createRedisClient({ mode: 'single', url }, { tls: false }), TEST_BAN, prefix, now);
