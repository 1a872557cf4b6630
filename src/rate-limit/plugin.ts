import { randomBytes } from 'node:crypto';
import fp from 'fastify-plugin';
import { Counter, Gauge } from 'prom-client';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { errors, secondsUntil } from '../platform/errors.js';
import { annotateRequestSpan } from '../platform/observability/tracing.js';
import { PLAN_LIMITS, type Limits } from '../api-keys/plans.js';
import type { ApiKeyIdentity } from '../api-keys/identity.js';
import { clientOf } from './address.js';
import { FallbackStore } from './fallback-store.js';
import { MemoryStore } from './memory-store.js';
import { createRedisClient, REDIS_START_WAIT_MS, type RedisCredentials, type RedisTarget } from './redis-connection.js';
import { RedisStore } from './redis-store.js';
import { checkPlanSettings } from './settings.js';
import {
  served,
  type Admission,
  type BanPolicy,
  type Decision,
  type Inspection,
  type RateLimitStore,
  type StoreKind,
  type WindowUsage,
} from './store.js';

export interface RateLimitOptions {
  ban: BanPolicy;
  /** Shared counters for any number of instances; without it, this instance counts alone. */
  redis?: RedisTarget;
  redisCredentials: RedisCredentials;
  redisKeyPrefix: string;
  /** Callers without a key count per IPv6 network of this many leading bits (see clientOf). */
  ipv6Prefix: number;
  /** What an operation (by operationId) costs a key, where it is not 1 (RATE_LIMIT_COSTS). */
  costs: Record<string, number>;
  /** Plans whose keys are served past their limits, counted as would-be refusals (RATE_LIMIT_SHADOW_PLANS). */
  shadowPlans: string[];
  /** Requests a key may have in flight, by plan, for the plans named (RATE_LIMIT_CONCURRENCY). */
  concurrency: Record<string, number>;
}

/** Callers without a valid key are limited by address, as the Free plan, so keys cannot be guessed at speed. */
const ANONYMOUS: Limits = PLAN_LIMITS.free;

/** On every response under /v1 (documented by v1/contract.ts). */
export const RATE_LIMIT_HEADERS = {
  'x-ratelimit-limit': { type: 'integer', description: 'Units allowed in the binding window (requests, unless an operation costs more)' },
  'x-ratelimit-remaining': { type: 'integer', description: 'Units left in the binding window' },
  'x-ratelimit-reset': { type: 'integer', description: 'Unix time (seconds) when the binding window resets, or a ban ends' },
  'ratelimit-policy': { type: 'string', description: 'Both windows, as in draft-ietf-httpapi-ratelimit-headers' },
  ratelimit: { type: 'string', description: 'What is left of both windows and seconds until each resets' },
} as const;

/** GET /v1/rate_limit's own limit per key: counted apart from the key's windows, and banning no one. */
const QUOTA_LOOKUPS: Limits = { perMinute: 60, perDay: 60 * 24 * 60 };

/** The subject a key counts as: its quota, which the keys rotated from one another share. */
const keySubject = (quotaId: number) => `key:${quotaId}`;
/** The subject a caller without a valid key counts as: its client address (see clientOf). */
const addressSubject = (client: string) => `ip:${client}`;
/** The subject a key's quota lookups count as. */
const lookupSubject = (quotaId: number) => `lookups:${quotaId}`;

/** A key's standing, as GET /v1/rate_limit tells it. */
export interface Standing {
  minute: WindowUsage;
  day: WindowUsage;
  /** `limit` null: the key has no concurrency limit. */
  concurrency: { limit: number | null; inFlight: number };
}

interface Charge {
  subject: string;
  limits: Limits;
  decision: Decision;
  /** The units the request spends in both windows. */
  cost: number;
  now: number;
  /** False for a request admitted uncounted, as a sure free revalidation. */
  counted: boolean;
  /** Whether its refusals count towards a ban: false in shadow mode. */
  bans: boolean;
}

/** A request decided and with nothing left to settle: refused, or settled already. */
const SETTLED = 0;

/**
 * Where a request's charge waits for settle(), unset while the limiter has not decided it: a
 * request decoration that only this module can name. Set on every request, it is cheaper than a
 * WeakMap entry.
 */
const CHARGE = Symbol('rateLimitCharge');
/** Where a request that holds a slot of its key's concurrency limit keeps the way to give it back: as CHARGE, this module's alone. */
const SLOT = Symbol('rateLimitSlot');
type Charged = FastifyRequest & { [CHARGE]?: Charge | typeof SETTLED; [SLOT]?: () => Promise<void> };

/** What the limiter decided of a request: rate_limit_decisions_total's outcomes. */
type RateLimitOutcome = Decision['outcome'] | 'concurrency_limited' | 'cost_exceeds_limit';

declare module 'fastify' {
  interface FastifyInstance {
    rateLimit: RateLimiter;
  }
}

/** What a watcher of keys' usage hears (app.rateLimit.watchUsage): the webhooks' usage events. */
export interface UsageWatcher {
  /** Percentages of a window's limit: crossed() hears of each one a key's request takes its window to or past. */
  thresholds: number[];
  crossed(event: { key: ApiKeyIdentity; window: 'minute' | 'day'; limit: number; used: number; threshold: number; resetAt: number }): void;
  /** A key's refusals started a ban, ending at bannedUntil (ms since the epoch). */
  banned(event: { key: ApiKeyIdentity; bannedUntil: number }): void;
}

export interface RateLimiter {
  /**
   * Tells the watcher of each threshold a key's counted request crosses and of each ban a key's
   * request starts, on the instance whose decision did it: with Redis, one instance each time.
   */
  watchUsage(watcher: UsageWatcher): void;
  /** The units an operation costs a key: what RATE_LIMIT_COSTS says, else 1. */
  costOf(operationId: string | undefined): number;
  /** The operations RATE_LIMIT_COSTS prices (the API's routes refuse to start with one they do not serve). */
  pricedOperations(): string[];
  /** Whether the client an address counts as is banned now (auth then spends no lookup on its key). */
  addressBanned(address: string, now: number): Promise<boolean>;
  /**
   * Decides the request of its caller (its key, else its address), sets the headers, and throws
   * its 429. A request sure to be a free revalidation, or of an operation that costs 0 (the quota
   * lookup), is only checked against the limits. A key spends its operation's `cost` (costOf) and
   * holds a slot of its concurrency limit while in flight (unless the operation costs 0); an
   * address, whose requests never reach an operation, spends 1. The slot is given back by settle,
   * or when the connection closes first (before admit too: a client gone during the key lookup).
   */
  admit(
    request: FastifyRequest,
    reply: FastifyReply,
    caller: { key: ApiKeyIdentity | undefined; now: number; free: boolean; cost: number },
  ): Promise<void>;
  /**
   * Once answered: takes back a counted request that turned out free, or counts an uncounted one
   * that did not, and gives back the request's slot of its key's concurrency limit. The response
   * waits for both, so the caller's next request, on any instance, sees them.
   * A request answered before it was decided (load shedding, shutdown, a key lookup that failed)
   * counts nothing and gets the headers of its caller as they stand: of its key, else of its address.
   */
  settle(
    request: FastifyRequest,
    reply: FastifyReply,
    caller: { key: ApiKeyIdentity | undefined; free: boolean },
  ): Promise<unknown> | undefined;
  /**
   * The key's windows and requests in flight now, counting nothing of them: one of its quota
   * lookups, which have a limit of their own (60 a minute, 429 rate_limited past it; no ban).
   */
  standing(key: ApiKeyIdentity, now: number): Promise<Standing>;
  /** The requests of a key's quota in flight now, on every instance that shares the store. */
  inFlight(quotaId: number, now: number): Promise<number>;
  /** What a key's quota holds now (both windows, a ban), counting nothing, and which store answered (the admin API). */
  usage(quotaId: number, limits: Limits, now: number): Promise<Inspection>;
  /** Lifts a key's ban in the store decisions go to now (the admin API); says which. */
  liftBan(quotaId: number, now: number): Promise<StoreKind>;
  /** The clients (see clientOf) banned now, and which store answered (the admin API). */
  addressBans(now: number): Promise<{ bans: Array<{ address: string; bannedUntil: number }>; source: StoreKind }>;
  /**
   * Lifts the ban of the client an address (or a client as addressBans names it) counts as, in
   * the store decisions go to now; says which client, when its ban would have ended, if it had one, and which store.
   */
  liftAddressBan(address: string, now: number): Promise<{ address: string; bannedUntil?: number; source: StoreKind }>;
}

/**
 * Per-plan limits on every request of the context whose pipeline calls it, before validation, so
 * every response (400s and 401s included) carries the headers and counts; 429s do not count.
 */
export default fp<RateLimitOptions>(
  async function rateLimit(app, options) {
    checkPlanSettings(options);
    const shadowPlans = new Set(options.shadowPlans);
    const memory = new MemoryStore(options.ban, { now: app.now });
    let store: RateLimitStore = memory;
    if (options.redis) {
      const client = createRedisClient(options.redis, options.redisCredentials);
      const redis = new RedisStore(client, options.ban, options.redisKeyPrefix, app.now);
      await redis.connect(REDIS_START_WAIT_MS).catch((error) => app.log.warn({ err: error }, 'rate limiting: Redis unreachable at start'));
      store = new FallbackStore(redis, memory, app.log);
    }
    const decisions = new Counter({
      name: 'rate_limit_decisions_total',
      help: 'Rate-limit decisions: allowed, limited (429 rate_limited), banned (429 api_key_banned), concurrency_limited (429 concurrency_limited) and cost_exceeds_limit (403)',
      labelNames: ['outcome'] as const,
      registers: [app.metricsRegistry],
    });
    const shadowRefusals = new Counter({
      name: 'rate_limit_shadow_refusals_total',
      help: 'Requests of keys in shadow mode served past their limits: the 429s enforcement would have answered',
      labelNames: ['plan'] as const,
      registers: [app.metricsRegistry],
    });
    if (store instanceof FallbackStore) {
      const fallback = store;
      new Gauge({
        name: 'rate_limit_redis_fallback',
        help: '1 while Redis is unreachable and this instance limits from its own memory',
        registers: [app.metricsRegistry],
        collect() {
          this.set(fallback.degraded ? 1 : 0);
        },
      });
    }
    app.addHook('onClose', async () => {
      await store.close();
    });

    app.decorateRequest(CHARGE, undefined);
    app.decorateRequest(SLOT, undefined);
    /** Counts the decision, and names it on the request's span. */
    const decided = (request: FastifyRequest, outcome: RateLimitOutcome) => {
      decisions.inc({ outcome });
      annotateRequestSpan(request, { rateLimitOutcome: outcome });
    };
    /** Leases name their instance, so that no two instances' leases on one Redis are the same. */
    const leasePrefix = randomBytes(6).toString('hex');
    let leases = 0;

    /** The key's limit of requests in flight: its own, else its plan's; undefined for none. */
    const concurrencyOf = (key: ApiKeyIdentity): number | undefined => key.concurrency ?? options.concurrency[key.plan];

    /** Gives the slot the request holds back once its answer is about to leave (settle) or its connection closes, whichever comes first. */
    function keepSlot(request: FastifyRequest, reply: FastifyReply, subject: string, lease: string) {
      let released: Promise<void> | undefined;
      const release = () =>
        (released ??= store
          .release(subject, lease)
          .catch((error: unknown) => app.log.warn({ err: error }, 'rate limiting: releasing a slot failed')));
      // A connection that closed before now (while the key was looked up, or Redis answered) has
      // emitted its 'close' already: its slot is given back at once.
      if (reply.raw.destroyed) return void release();
      reply.raw.once('close', () => void release());
      (request as Charged)[SLOT] = release;
    }

    const clientOfAddress = (address: string) => clientOf(address, options.ipv6Prefix);

    /** What `check` says of the caller now: honest headers for a request that was never counted. */
    async function describeUndecided(request: FastifyRequest, reply: FastifyReply, key: ApiKeyIdentity | undefined) {
      const now = app.now();
      setHeaders(
        reply,
        await store.check(key ? keySubject(key.quotaId) : addressSubject(clientOfAddress(request.ip)), key ?? ANONYMOUS, now, 1),
        now,
      );
    }

    // GitHub's rule: a revalidation that finds the client's copy current (304 for a tag it sent)
    // costs nothing. The request was admitted like any other, so a caller over its limit still got its 429.
    function settleCharge(request: FastifyRequest, reply: FastifyReply, key: ApiKeyIdentity | undefined, free: boolean) {
      const charge = (request as Charged)[CHARGE];
      if (charge === undefined) {
        (request as Charged)[CHARGE] = SETTLED;
        return describeUndecided(request, reply, key);
      }
      if (charge === SETTLED || free !== charge.counted) return undefined;
      (request as Charged)[CHARGE] = SETTLED;
      if (charge.counted) {
        const uncount = (window: WindowUsage) => ({ ...window, used: Math.max(0, window.used - charge.cost) });
        setHeaders(
          reply,
          { ...charge.decision, minute: uncount(charge.decision.minute), day: uncount(charge.decision.day) },
          charge.now,
          charge.cost,
        );
        return store.refund(charge.subject, charge.decision, charge.cost);
      }
      // Admitted uncounted as a sure 304, it was refused further on (a sunset meanwhile): it counts.
      return store.consume(charge.subject, charge.limits, charge.now, charge.cost, charge.bans);
    }

    const watchers: UsageWatcher[] = [];
    /** Tells the watchers which thresholds this request's cost took either window of its key across. */
    function reportCrossings(key: ApiKeyIdentity, decision: Decision, cost: number) {
      for (const watcher of watchers) {
        for (const window of ['minute', 'day'] as const) {
          const { limit, used, resetAt } = decision[window];
          for (const threshold of watcher.thresholds) {
            const mark = threshold * limit;
            if ((used - cost) * 100 < mark && mark <= used * 100) watcher.crossed({ key, window, limit, used, threshold, resetAt });
          }
        }
      }
    }

    app.decorate('rateLimit', {
      watchUsage: (watcher) => void watchers.push(watcher),
      costOf: (operationId) => (operationId === undefined ? 1 : (options.costs[operationId] ?? 1)),
      pricedOperations: () => Object.keys(options.costs),

      async addressBanned(address, now) {
        return (await store.check(addressSubject(clientOfAddress(address)), ANONYMOUS, now, 1)).outcome === 'banned';
      },

      async admit(request, reply, { key, now, free, cost: operationCost }) {
        const shadow = key !== undefined && (!key.enforceLimits || shadowPlans.has(key.plan));
        // Dearer than a window of the key (limits stored before RATE_LIMIT_COSTS rose): no wait would let it through.
        if (key && !shadow && !free && operationCost > Math.min(key.perMinute, key.perDay)) {
          decided(request, 'cost_exceeds_limit');
          const [limit, window] = operationCost > key.perMinute ? [key.perMinute, 'minute' as const] : [key.perDay, 'day' as const];
          throw errors.costExceedsLimit(operationCost, limit, window);
        }
        const client = key ? undefined : clientOfAddress(request.ip);
        const subject = client === undefined ? keySubject(key!.quotaId) : addressSubject(client);
        const limits = key ?? ANONYMOUS;
        const cost = key ? operationCost : 1;
        const limit = key && operationCost > 0 ? concurrencyOf(key) : undefined;
        // With a concurrency limit, the slot and the windows are decided together: one round trip to Redis.
        const slot = limit === undefined ? undefined : { limit, lease: `${leasePrefix}:${++leases}` };
        const decide = (count: boolean): Promise<Admission> => {
          if (slot) return store.admit(subject, limits, now, { cost, bans: !shadow, count, slot });
          return count ? store.consume(subject, limits, now, cost, !shadow) : store.check(subject, limits, now, cost);
        };
        const checked = free || cost === 0 ? await decide(false) : undefined;
        const decision = checked?.outcome === 'allowed' || checked?.outcome === 'busy' ? checked : await decide(true);
        if (decision.outcome === 'busy') {
          (request as Charged)[CHARGE] = SETTLED;
          setHeaders(reply, decision.standing, now);
          decided(request, 'concurrency_limited');
          throw errors.concurrencyLimited(limit!);
        }
        if (slot && served(decision, decision !== checked, !shadow)) keepSlot(request, reply, subject, slot.lease);
        const binding = setHeaders(reply, decision, now, cost);
        decided(request, decision.outcome);
        switch (decision.outcome) {
          case 'allowed':
            (request as Charged)[CHARGE] = { subject, limits, decision, cost, now, counted: decision !== checked, bans: !shadow };
            if (key && watchers.length > 0 && decision !== checked) reportCrossings(key, decision, cost);
            return;
          case 'banned': {
            (request as Charged)[CHARGE] = SETTLED;
            const until = new Date(decision.bannedUntil).toISOString();
            if (decision.banStarted) {
              request.log.warn({ keyId: key?.id, address: client, until }, 'rate limit ban');
              if (key) for (const watcher of watchers) watcher.banned({ key, bannedUntil: decision.bannedUntil });
            }
            throw errors.banned(until, secondsUntil(decision.bannedUntil - now));
          }
          case 'limited':
            (request as Charged)[CHARGE] = SETTLED;
            if (shadow) {
              shadowRefusals.inc({ plan: key.plan });
              const window = binding === decision.day ? 'day' : 'minute';
              // The first of the minute, on whichever instance: the store counts them.
              if (decision.refusals === 1) request.log.warn({ keyId: key.id, plan: key.plan, window, cost }, 'rate limit shadow refusal');
              return;
            }
            throw errors.rateLimited(binding.limit, binding === decision.day ? 'day' : 'minute', secondsUntil(binding.resetAt - now), {
              cost,
              remaining: binding.limit - binding.used,
            });
        }
      },

      settle(request, reply, { key, free }) {
        const settling = settleCharge(request, reply, key, free);
        const releaseSlot = (request as Charged)[SLOT];
        if (releaseSlot === undefined) return settling;
        // Given back before the answer leaves: the caller's next request, on any instance, finds it free.
        return settling ? Promise.all([releaseSlot(), settling]) : releaseSlot();
      },

      async standing(key, now) {
        const lookup = await store.consume(lookupSubject(key.quotaId), QUOTA_LOOKUPS, now, 1, false);
        if (lookup.outcome !== 'allowed')
          throw errors.quotaLookupsLimited(QUOTA_LOOKUPS.perMinute, secondsUntil(lookup.minute.resetAt - now));
        const subject = keySubject(key.quotaId);
        const [windows, inFlight] = await Promise.all([store.check(subject, key, now, 1), store.inFlight(subject, now)]);
        return { minute: windows.minute, day: windows.day, concurrency: { limit: concurrencyOf(key) ?? null, inFlight } };
      },
      inFlight: (quotaId, now) => store.inFlight(keySubject(quotaId), now),
      usage: (quotaId, limits, now) => store.inspect(keySubject(quotaId), limits, now),
      liftBan: (quotaId, now) => store.liftBan(keySubject(quotaId), now),

      async addressBans(now) {
        const { bans, source } = await store.bans(addressSubject(''), now);
        const listed = bans.map(({ subject, bannedUntil }) => ({ address: subject.slice(addressSubject('').length), bannedUntil }));
        return { bans: listed.sort((a, b) => a.address.localeCompare(b.address)), source };
      },

      async liftAddressBan(address, now) {
        const client = clientOfAddress(address.replace(/\/\d+$/, ''));
        const subject = addressSubject(client);
        const { decision } = await store.inspect(subject, ANONYMOUS, now);
        const source = await store.liftBan(subject, now);
        return { address: client, bannedUntil: decision.outcome === 'banned' ? decision.bannedUntil : undefined, source };
      },
    } satisfies RateLimiter);
  },
  { name: 'rate-limit', dependencies: ['metrics'] },
);

/**
 * X-RateLimit-* describe the binding window: the one with fewer units left (the minute on a tie,
 * the day once it has no room for the operation's cost, since retrying after the minute would not
 * help). The IETF draft's RateLimit and RateLimit-Policy fields describe both. A ban's Reset is its end.
 */
function setHeaders(reply: FastifyReply, decision: Decision, now: number, cost = 1): WindowUsage {
  const remaining = (window: WindowUsage) => Math.max(0, window.limit - window.used);
  const { minute, day } = decision;
  const binding = remaining(day) < cost || remaining(day) < remaining(minute) ? day : minute;
  const banned = decision.outcome === 'banned';
  reply.headers({
    'x-ratelimit-limit': binding.limit,
    'x-ratelimit-remaining': banned ? 0 : remaining(binding),
    'x-ratelimit-reset': Math.ceil((banned ? decision.bannedUntil : binding.resetAt) / 1000),
    'ratelimit-policy': `"minute";q=${minute.limit};w=60, "day";q=${day.limit};w=86400`,
    ratelimit: `"minute";r=${banned ? 0 : remaining(minute)};t=${secondsUntil(minute.resetAt - now)}, "day";r=${banned ? 0 : remaining(day)};t=${secondsUntil(day.resetAt - now)}`,
  });
  return binding;
}
