import type { FastifyInstance } from 'fastify';
import type { BalanceRecords, LiveBalances } from '../../credits/ports.js';
import { FallbackStore } from './fallback-store.js';
import { MemoryStore } from './memory-store.js';
import { createRedisClient, REDIS_START_WAIT_MS } from './redis-connection.js';
import type { RedisCredentials, RedisTarget } from './redis-settings.js';
import { RedisStore } from './redis-store.js';
import type { BanPolicy, RateLimitStore } from './store.js';

export interface StoreOptions {
  ban: BanPolicy;
  /** Shared counters for any number of instances; without it, this instance counts alone. */
  redis?: RedisTarget;
  redisCredentials: RedisCredentials;
  redisKeyPrefix: string;
}

/**
 * The store decisions go to, closed with the app: this instance's memory, or Redis with that
 * memory as its fallback while Redis does not answer (a start without Redis included), and the
 * record of credits deciding their balances meanwhile. With Redis, `live`: its balances of credits,
 * which the record follows.
 */
export async function chooseStore(
  app: FastifyInstance,
  options: StoreOptions,
  record: BalanceRecords,
): Promise<{ store: RateLimitStore; live?: LiveBalances }> {
  const memory = new MemoryStore(options.ban, { now: app.now });
  let store: RateLimitStore = memory;
  let live: LiveBalances | undefined;
  if (options.redis) {
    const client = createRedisClient(options.redis, options.redisCredentials);
    const redis = new RedisStore(client, options.ban, options.redisKeyPrefix, app.now);
    await redis.connect(REDIS_START_WAIT_MS).catch((error) => app.log.warn({ err: error }, 'rate limiting: Redis unreachable at start'));
    const fallback = new FallbackStore(redis, memory, app.log, record);
    store = fallback;
    live = fallback.live;
  }
  app.addHook('onClose', async () => {
    await store.close();
  });
  return { store, live };
}
