import { Redis } from 'ioredis';

async function withRedis<T>(url: string, work: (redis: Redis) => Promise<T>): Promise<T> {
  const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  redis.on('error', () => {});
  try {
    await redis.connect();
    return await work(redis);
  } finally {
    redis.disconnect();
  }
}

/** Fails at once when Redis is down: a service would quietly fall back to memory, and what is measured would lie. */
export const assertRedisUp = (url: string) =>
  withRedis(url, async (redis) => void (await redis.ping())).catch((error: Error) => {
    throw new Error(`Redis at ${url} is unreachable (${error.message})`);
  });

async function keysWithPrefix(redis: Redis, prefix: string): Promise<string[]> {
  const keys: string[] = [];
  // A MATCH pattern, so the prefix's glob characters are escaped.
  const pattern = `${prefix.replace(/[*?[\]\\]/g, '\\$&')}*`;
  for await (const batch of redis.scanStream({ match: pattern, count: 1000 })) keys.push(...(batch as string[]));
  return keys;
}

/** How many keys the rate limiter wrote under a prefix: none means it counted in memory. */
export const countKeys = (url: string, prefix: string) => withRedis(url, async (redis) => (await keysWithPrefix(redis, prefix)).length);

/** Leaves a shared Redis as it was found. */
export const deleteKeys = (url: string, prefix: string) =>
  withRedis(url, async (redis) => {
    const keys = await keysWithPrefix(redis, prefix);
    if (keys.length > 0) await redis.unlink(...keys);
  });

/** How many times each command ran since the counts were last reset (CONFIG RESETSTAT), from INFO commandstats: `evalsha`, `zrem`... */
export const commandCalls = (url: string) =>
  withRedis(url, async (redis) => {
    const calls: Record<string, number> = {};
    for (const [, command, count] of (await redis.info('commandstats')).matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm))
      calls[command!] = Number(count);
    return calls;
  });
