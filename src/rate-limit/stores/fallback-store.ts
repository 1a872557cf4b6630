import type { FastifyBaseLogger } from 'fastify';
import type { BalanceRecords, LiveBalances } from '../../credits/ports.js';
import type { Limits } from '../../plans/limits.js';
import type { MemoryStore } from './memory-store.js';
import { OutageCredits } from './outage-credits.js';
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
 * Balances of credits are not: during an outage they are decided in their record in PostgreSQL,
 * a transaction per balance for the requests that arrived meanwhile (OutageCredits), so that instances deciding apart spend
 * exactly what remains. Once Redis is back, the balances spent here are dropped from it, so that
 * their next request seeds them from the record, which holds what was spent meanwhile
 * (docs/decisions/credits.md).
 */
export class FallbackStore implements RateLimitStore {
  readonly #redis: RedisStore;
  readonly #memory: MemoryStore;
  readonly #log: FastifyBaseLogger;
  readonly #credits: OutageCredits;
  #probe: NodeJS.Timeout | undefined;

  constructor(redis: RedisStore, memory: MemoryStore, log: FastifyBaseLogger, record: BalanceRecords) {
    this.#redis = redis;
    this.#memory = memory;
    this.#log = log;
    this.#credits = new OutageCredits(memory, record);
  }

  /** True while decisions come from this instance's memory. */
  get degraded() {
    return this.#probe !== undefined;
  }

  consume(subject: string, limits: Limits, now: number, cost: number, bans: boolean, credits?: readonly CreditClaim[]): Promise<Decision> {
    return this.#decide(
      (store) => store.consume(subject, limits, now, cost, bans, credits),
      credits?.length ? () => this.#credits.consume(subject, limits, now, cost, bans, credits) : undefined,
    );
  }

  admit(subject: string, limits: Limits, now: number, claim: Claim): Promise<Admission> {
    const { credits } = claim;
    return this.#decide(
      (store) => store.admit(subject, limits, now, claim),
      credits?.length ? () => this.#credits.admit(subject, limits, now, claim, credits) : undefined,
    );
  }

  decideShared(subject: string, limits: Limits, now: number, claim: Claim, shared: Shared): Promise<SharedAdmission> {
    const { credits } = claim;
    return this.#decide(
      (store) => store.decideShared(subject, limits, now, claim, shared),
      credits?.length ? () => this.#credits.decideShared(subject, limits, now, claim, shared, credits) : undefined,
    );
  }

  /** Redis's balances, which the record follows; none while decisions are made in memory (the record is then where balances are spent). */
  readonly live: LiveBalances = {
    read: (balances) =>
      this.degraded
        ? Promise.reject(new Error('Redis unreachable: the record of credits is where balances are spent'))
        : this.#redis.live.read(balances),
    all: () => this.#redis.live.all(),
  };

  /** From both: Redis, where a failure leaves the hash to expire, and this instance's memory. */
  async forgetBalance(subject: string, id: number) {
    await Promise.all([this.#memory.forgetBalance(subject, id), this.#redis.forgetBalance(subject, id).catch(() => {})]);
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
    return this.#decide(
      (store) => store.check(subject, limits, now, cost, credits),
      credits?.length ? () => this.#credits.check(subject, limits, now, cost, credits) : undefined,
    );
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

  /** Asks Redis, else memory; `outage`, where given, decides in memory's stead (a request's credits). */
  async #decide<T>(ask: (store: RateLimitStore) => Promise<T>, outage?: () => Promise<T>): Promise<T> {
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
    return outage ? outage() : ask(this.#memory);
  }

  /**
   * To the store that counted the request, as far as can be told: a refund lost with Redis is only
   * a request counted. Credits spent in their record (during an outage) are given back there.
   */
  async refund(subject: string, decision: Decision, cost: number, credits?: readonly CreditClaim[]) {
    await this.#refundCredits(decision, cost, credits);
    if (this.degraded) return this.#memory.refund(subject, decision, cost);
    await this.#redis.refund(subject, decision, cost, credits).catch((error: unknown) => this.#switchToMemory(error));
  }

  async refundShared(subject: string, customerSubject: string, decision: Decision, cost: number, credits?: readonly CreditClaim[]) {
    await this.#refundCredits(decision, cost, credits);
    if (this.degraded) return this.#memory.refundShared(subject, customerSubject, decision, cost);
    await this.#redis
      .refundShared(subject, customerSubject, decision, cost, credits)
      .catch((error: unknown) => this.#switchToMemory(error));
  }

  /** A refund that cannot reach the record leaves its cost spent: the 304 is answered all the same. */
  #refundCredits(decision: Decision, cost: number, credits: readonly CreditClaim[] | undefined) {
    return this.#credits
      .refund(decision, cost, credits, this.degraded)
      .catch((error: unknown) => this.#log.warn({ err: error }, "credits: giving back a free revalidation's cost failed"));
  }

  #switchToMemory(error: unknown) {
    if (this.degraded) return;
    this.#log.warn({ err: error }, 'rate limiting: Redis unreachable; limiting per instance from memory until it is back');
    let probing = false;
    this.#probe = setInterval(() => {
      if (probing) return;
      probing = true;
      pingAll(this.#redis.redis)
        .then(() => this.#credits.forgetIn(this.#redis))
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
