import type { FastifyBaseLogger } from 'fastify';
import type { Limits } from '../api-keys/plans.js';
import type { MemoryStore } from './memory-store.js';
import { pingAll } from './redis-connection.js';
import type { RedisStore } from './redis-store.js';
import type {
  Admission,
  Bans,
  Claim,
  CreditClaim,
  Decision,
  Inspection,
  RateLimitStore,
  Shared,
  SharedAdmission,
  StoreKind,
} from './store.js';

/** While on memory, how often Redis is asked whether it answers again: the bound on how long counting stays local after it does. */
const REDIS_PROBE_MS = 1_000;

/**
 * Redis while it answers; this instance's memory while it does not, so no request fails because
 * of Redis. An outage is one switch to memory and one back, each logged once: the first failed
 * decision switches, and from then on every decision is made in memory until a probe finds
 * every node decisions may reach (each master of a cluster) answering again.
 * Balances of credits too are this instance's during an outage, each seeded from its record on
 * its first request here (docs/decisions/credits.md says what that can cost); once Redis is back,
 * the balances spent here are dropped from both, so that their next request seeds them from the
 * record again, which by then holds what was spent here.
 */
export class FallbackStore implements RateLimitStore {
  readonly #redis: RedisStore;
  readonly #memory: MemoryStore;
  readonly #log: FastifyBaseLogger;
  #probe: NodeJS.Timeout | undefined;

  constructor(redis: RedisStore, memory: MemoryStore, log: FastifyBaseLogger) {
    this.#redis = redis;
    this.#memory = memory;
    this.#log = log;
  }

  /** True while decisions come from this instance's memory. */
  get degraded() {
    return this.#probe !== undefined;
  }

  consume(subject: string, limits: Limits, now: number, cost: number, bans: boolean, credits?: readonly CreditClaim[]): Promise<Decision> {
    return this.#decide((store) => store.consume(subject, limits, now, cost, bans, credits));
  }

  admit(subject: string, limits: Limits, now: number, claim: Claim): Promise<Admission> {
    return this.#decide((store) => store.admit(subject, limits, now, claim));
  }

  decideShared(subject: string, limits: Limits, now: number, claim: Claim, shared: Shared): Promise<SharedAdmission> {
    return this.#decide((store) => store.decideShared(subject, limits, now, claim, shared));
  }

  inFlight(subject: string, now: number): Promise<number> {
    return this.#decide((store) => store.inFlight(subject, now));
  }

  /**
   * From whichever store holds the lease, each giving back only a lease it holds: Redis too while
   * degraded, since a lease taken before the outage is renewed until given back (and one Redis
   * cannot be told of expires).
   */
  async release(subject: string, lease: string) {
    await this.#memory.release(subject, lease);
    await this.#redis.release(subject, lease).catch((error: unknown) => this.#switchToMemory(error));
  }

  check(subject: string, limits: Limits, now: number, cost: number, credits?: readonly CreditClaim[]): Promise<Decision> {
    return this.#decide((store) => store.check(subject, limits, now, cost, credits));
  }

  inspect(subject: string, limits: Limits, now: number): Promise<Inspection> {
    return this.#decide((store) => store.inspect(subject, limits, now));
  }

  bans(prefix: string, now: number): Promise<Bans> {
    return this.#decide((store) => store.bans(prefix, now));
  }

  /** In Redis when it answers, and in this instance's memory too, where a ban from an earlier outage would come back with the next. */
  async liftBan(subject: string, now: number): Promise<StoreKind> {
    const source = await this.#decide((store) => store.liftBan(subject, now));
    if (source === 'redis') await this.#memory.liftBan(subject);
    return source;
  }

  async #decide<T>(ask: (store: RateLimitStore) => Promise<T>): Promise<T> {
    if (!this.degraded) {
      if (this.#redis.ready) {
        try {
          return await ask(this.#redis);
        } catch (error) {
          this.#switchToMemory(error);
        }
      } else {
        this.#switchToMemory(new Error(`Redis connection is ${this.#redis.redis.status}`));
      }
    }
    return ask(this.#memory);
  }

  /** To the store that counted the request, as far as can be told: a refund lost with Redis is only a request counted. */
  async refund(subject: string, decision: Decision, cost: number, credits?: readonly CreditClaim[]) {
    if (this.degraded) return this.#memory.refund(subject, decision, cost, credits);
    await this.#redis.refund(subject, decision, cost, credits).catch((error: unknown) => this.#switchToMemory(error));
  }

  async refundShared(subject: string, customerSubject: string, decision: Decision, cost: number, credits?: readonly CreditClaim[]) {
    if (this.degraded) return this.#memory.refundShared(subject, customerSubject, decision, cost, credits);
    await this.#redis
      .refundShared(subject, customerSubject, decision, cost, credits)
      .catch((error: unknown) => this.#switchToMemory(error));
  }

  #switchToMemory(error: unknown) {
    if (this.degraded) return;
    this.#log.warn({ err: error }, 'rate limiting: Redis unreachable; limiting per instance from memory until it is back');
    let probing = false;
    this.#probe = setInterval(() => {
      if (probing) return;
      probing = true;
      pingAll(this.#redis.redis)
        .then(() => this.#redis.forgetCredits(this.#memory.credits.forget()))
        .then(() => {
          clearInterval(this.#probe);
          this.#probe = undefined;
          this.#log.info('rate limiting: Redis is back; counting across all instances again');
        })
        .catch(() => {})
        .finally(() => (probing = false));
    }, REDIS_PROBE_MS).unref();
  }

  async close() {
    clearInterval(this.#probe);
    await Promise.all([this.#redis.close(), this.#memory.close()]);
  }
}
