import type { FastifyBaseLogger } from 'fastify';
import type { Limits } from '../../plans.js';
import type { MemoryStore } from './memory-store.js';
import type { RedisStore } from './redis-store.js';
import type { Decision, RateLimitStore } from './store.js';

/**
 * Redis while it answers; this instance's memory while it does not, so no request fails because
 * of Redis. Each switch is logged once; ioredis reconnects by itself and Redis takes over again.
 */
export class FallbackStore implements RateLimitStore {
  readonly #redis: RedisStore;
  readonly #memory: MemoryStore;
  readonly #log: FastifyBaseLogger;
  #onMemory = false;

  constructor(redis: RedisStore, memory: MemoryStore, log: FastifyBaseLogger) {
    this.#redis = redis;
    this.#memory = memory;
    this.#log = log;
  }

  /** True while decisions come from this instance's memory. */
  get degraded() {
    return this.#onMemory;
  }

  consume(subject: string, limits: Limits, now: number): Promise<Decision> {
    return this.#decide((store) => store.consume(subject, limits, now));
  }

  check(subject: string, limits: Limits, now: number): Promise<Decision> {
    return this.#decide((store) => store.check(subject, limits, now));
  }

  async #decide(ask: (store: RateLimitStore) => Promise<Decision>): Promise<Decision> {
    if (this.#redis.ready) {
      try {
        const decision = await ask(this.#redis);
        if (this.#onMemory) {
          this.#onMemory = false;
          this.#log.info('rate limiting: Redis is back; counting across all instances again');
        }
        return decision;
      } catch (error) {
        this.#switchToMemory(error);
      }
    } else {
      this.#switchToMemory(new Error(`Redis connection is ${this.#redis.redis.status}`));
    }
    return ask(this.#memory);
  }

  /** To the store that counted the request, as far as can be told: a refund lost with Redis is only a request counted. */
  async refund(subject: string, decision: Decision) {
    if (this.#onMemory || !this.#redis.ready) return this.#memory.refund(subject, decision);
    await this.#redis.refund(subject, decision).catch((error: unknown) => this.#switchToMemory(error));
  }

  #switchToMemory(error: unknown) {
    if (this.#onMemory) return;
    this.#onMemory = true;
    this.#log.warn({ err: error }, 'rate limiting: Redis unreachable; limiting per instance from memory until it is back');
  }

  async close() {
    await Promise.all([this.#redis.close(), this.#memory.close()]);
  }
}
