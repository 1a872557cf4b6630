import { Redis } from 'ioredis';

async function withRedis<T>(url: string, work: (redis: Redis) => Promise<T>): Promise<T> {
  const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  redis.on('error', () => {});
  try {
    await redis.connect();
    return await work(redis);
  } finally {
    redis.disconnect();
  }
}

/** Fails at once when Redis is down: the service would quietly fall back to memory and the Redis rows would lie. */
export const assertRedisUp = (url: string) =>
  withRedis(url, async (redis) => void (await redis.ping())).catch((error: Error) => {
    throw new Error(`Redis at ${url} is unreachable (${error.message}); the Redis-store scenarios need it`);
  });

async function keysWithPrefix(redis: Redis, prefix: string): Promise<string[]> {
  const keys: string[] = [];
  // A MATCH pattern, so the prefix's glob characters are escaped.
  const pattern = `${prefix.replace(/[*?[\]\\]/g, '\\$&')}*`;
  for await (const batch of redis.scanStream({ match: pattern, count: 1000 })) keys.push(...(batch as string[]));
  return keys;
}

/** How many keys the run's rate limiter wrote: none means the Redis rows measured the memory fallback. */
export const countKeys = (url: string, prefix: string) => withRedis(url, async (redis) => (await keysWithPrefix(redis, prefix)).length);

/** Leaves the shared Redis as it was found. */
export const deleteKeys = (url: string, prefix: string) =>
  withRedis(url, async (redis) => {
    const keys = await keysWithPrefix(redis, prefix);
    if (keys.length > 0) await redis.unlink(...keys);
  });
