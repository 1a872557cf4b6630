import fp from 'fastify-plugin';
import { Counter, Gauge } from 'prom-client';
import type { FastifyReply } from 'fastify';
import { ApiError } from '../../errors.js';
import { PLAN_LIMITS, type Limits } from '../../plans.js';
import { ErrorBody } from '../../schemas/error.js';
import { withHeaders, type ResponseSchemas } from '../../schemas/responses.js';
import { FallbackStore } from './fallback-store.js';
import { MemoryStore } from './memory-store.js';
import { RedisStore } from './redis-store.js';
import type { BanPolicy, Decision, RateLimitStore, WindowUsage } from './store.js';

export interface RateLimitOptions {
  ban: BanPolicy;
  /** Shared counters for any number of instances; without it, this instance counts alone. */
  redisUrl?: string;
  redisKeyPrefix: string;
  now: () => number;
}

/** Callers without a valid key are limited by address, as the Free plan, so keys cannot be guessed at speed. */
const ANONYMOUS: Limits = PLAN_LIMITS.free;

/**
 * Keys an instance has not seen are looked up in the database at most this often per address, so
 * a flood of made-up keys (with valid checksums) never lands on the database. Counted per
 * instance, apart from the request limits: a valid key's first request costs its caller nothing.
 */
const LOOKUPS: Limits = { perMinute: 60, perDay: 10_000 };

const RATE_LIMIT_HEADERS = {
  'x-ratelimit-limit': { type: 'integer', description: 'Requests allowed in the binding window' },
  'x-ratelimit-remaining': { type: 'integer', description: 'Requests left in the binding window' },
  'x-ratelimit-reset': { type: 'integer', description: 'Unix time (seconds) when the binding window resets, or a ban ends' },
  'ratelimit-policy': { type: 'string', description: 'Both windows, as in draft-ietf-httpapi-ratelimit-headers' },
  ratelimit: { type: 'string', description: 'What is left of both windows and seconds until each resets' },
} as const;

const seconds = (ms: number) => Math.max(1, Math.ceil(ms / 1000));

declare module 'fastify' {
  interface FastifyRequest {
    /** What the limiter counted this request against, so that a 304 can be taken back. */
    rateLimitCharge?: { subject: string; limits: Limits; decision: Decision; now: number; counted: boolean };
  }
}

/**
 * Per-plan limits on every request of the context it is registered in, before validation, so
 * every response (400s and 401s included) carries the headers and counts; 429s do not count.
 */
export default fp<RateLimitOptions>(
  async function rateLimit(app, options) {
    const memory = new MemoryStore(options.ban, { now: options.now });
    const lookups = new MemoryStore({ threshold: Number.MAX_SAFE_INTEGER, durationMs: 0 }, { now: options.now });
    let store: RateLimitStore = memory;
    if (options.redisUrl) {
      const redis = new RedisStore(options.redisUrl, options.ban, options.redisKeyPrefix);
      await redis.connect().catch((error) => app.log.warn({ err: error }, 'rate limiting: Redis unreachable at start'));
      store = new FallbackStore(redis, memory, app.log);
    }
    const decisions = new Counter({
      name: 'rate_limit_decisions_total',
      help: 'Rate-limit decisions: allowed, limited (429 rate_limited) and banned (429 api_key_banned)',
      labelNames: ['outcome'] as const,
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
      await Promise.all([store.close(), lookups.close()]);
    });

    app.addHook('onRoute', (route) => {
      if (!route.schema || route.schema.hide) return;
      route.schema.response = withHeaders(
        {
          ...(route.schema.response as ResponseSchemas),
          429: {
            ...ErrorBody,
            description: 'Rate limit exceeded (`rate_limited`), or the caller is banned for a while (`api_key_banned`)',
            headers: { 'retry-after': { type: 'integer', description: 'Seconds to wait before retrying' } },
          },
        },
        RATE_LIMIT_HEADERS,
      );
    });

    app.decorateRequest('rateLimitCharge', undefined);

    // GitHub's rule: a revalidation that finds the client's copy current (304) costs nothing. The
    // request was admitted like any other, so a caller over its limit still got its 429.
    // A callback hook: it runs on every request, and needs no promise.
    app.addHook('onSend', (request, reply, payload, done) => {
      const charge = request.rateLimitCharge;
      if (!charge || (reply.statusCode === 304) !== charge.counted) return done(null, payload);
      request.rateLimitCharge = undefined;
      // Not awaited: on this instance's one connection, either reaches Redis before any later decision.
      if (charge.counted) {
        void store.refund(charge.subject, charge.decision);
        const uncount = (window: WindowUsage) => ({ ...window, used: Math.max(0, window.used - 1) });
        setHeaders(reply, { ...charge.decision, minute: uncount(charge.decision.minute), day: uncount(charge.decision.day) }, charge.now);
      } else {
        // Admitted uncounted as a sure 304, it was refused further on (a sunset meanwhile): it counts.
        void store.consume(charge.subject, charge.limits, charge.now);
      }
      done(null, payload);
    });

    app.addHook('onRequest', async (request, reply) => {
      const now = options.now();
      let lookupRefused: Decision | undefined;
      if (request.keyToLookUp !== undefined) {
        const lookup = await lookups.consume(`lookup:${request.ip}`, LOOKUPS, now);
        if (lookup.outcome === 'allowed') await app.resolveKey(request);
        else lookupRefused = lookup;
      }
      const key = request.apiKey;
      const subject = key ? `key:${key.quotaId}` : `ip:${request.ip}`;
      const limits = key ?? ANONYMOUS;
      // A 304 known beforehand costs nothing: checked against the limits, counted only when refused.
      const checked = request.notModified ? await store.check(subject, limits, now) : undefined;
      const decision = checked?.outcome === 'allowed' ? checked : await store.consume(subject, limits, now);
      const binding = setHeaders(reply, decision, now);
      if (decision.outcome === 'allowed') request.rateLimitCharge = { subject, limits, decision, now, counted: decision !== checked };
      if (lookupRefused && decision.outcome === 'allowed') {
        const window = lookupRefused.day.used >= lookupRefused.day.limit ? lookupRefused.day : lookupRefused.minute;
        throw new ApiError(429, 'rate_limited', 'Too many unknown API keys from this address; retry after the Retry-After delay', {
          'retry-after': String(seconds(window.resetAt - now)),
        });
      }
      decisions.inc({ outcome: decision.outcome });
      if (decision.outcome === 'allowed') return;

      if (decision.outcome === 'banned') {
        const until = new Date(decision.bannedUntil!).toISOString();
        if (decision.banStarted) request.log.warn({ keyId: key?.id, address: key ? undefined : request.ip, until }, 'rate limit ban');
        throw new ApiError(429, 'api_key_banned', `Too many requests after being rate limited; banned until ${until}`, {
          'retry-after': String(seconds(decision.bannedUntil! - now)),
        });
      }
      const window = binding === decision.day ? 'day' : 'minute';
      throw new ApiError(429, 'rate_limited', `Rate limit of ${binding.limit} requests per ${window} exceeded; retry after the Retry-After delay`, {
        'retry-after': String(seconds(binding.resetAt - now)),
      });
    });
  },
  // After those two: what they document gets the limiter's headers, and the 304 is final by the time the refund looks.
  { name: 'rate-limit', dependencies: ['auth', 'metrics', 'idempotency', 'conditional-requests'] },
);

/**
 * X-RateLimit-* describe the binding window: the one with fewer requests left (the minute on a
 * tie, the day once it is spent, since retrying after the minute would not help). The IETF
 * draft's RateLimit and RateLimit-Policy fields describe both. A ban's Reset is its end.
 */
function setHeaders(reply: FastifyReply, decision: Decision, now: number): WindowUsage {
  const remaining = (window: WindowUsage) => Math.max(0, window.limit - window.used);
  const { minute, day } = decision;
  const binding = remaining(day) === 0 || remaining(day) < remaining(minute) ? day : minute;
  const banned = decision.outcome === 'banned';
  reply.headers({
    'x-ratelimit-limit': binding.limit,
    'x-ratelimit-remaining': banned ? 0 : remaining(binding),
    'x-ratelimit-reset': Math.ceil((banned ? decision.bannedUntil! : binding.resetAt) / 1000),
    'ratelimit-policy': `"minute";q=${minute.limit};w=60, "day";q=${day.limit};w=86400`,
    ratelimit: `"minute";r=${banned ? 0 : remaining(minute)};t=${seconds(minute.resetAt - now)}, "day";r=${banned ? 0 : remaining(day)};t=${seconds(day.resetAt - now)}`,
  });
  return binding;
}
