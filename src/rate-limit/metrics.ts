import { Counter, Gauge, type Registry } from 'prom-client';
import { FallbackStore } from './stores/fallback-store.js';
import type { Decision, RateLimitStore } from './stores/store.js';

/** What the limiter decided of a request: rate_limit_decisions_total's outcomes. */
export type RateLimitOutcome = Decision['outcome'] | 'concurrency_limited' | 'cost_exceeds_limit';

export interface RateLimitMetrics {
  decisions: Counter<'outcome'>;
  shadowRefusals: Counter<'plan'>;
}

/** The limiter's counters and, over Redis, the gauge that tells its fallback to memory. */
export function rateLimitMetrics(registry: Registry, store: RateLimitStore): RateLimitMetrics {
  const decisions = new Counter({
    name: 'rate_limit_decisions_total',
    help: 'Rate-limit decisions: allowed, limited (429 rate_limited), banned (429 api_key_banned), concurrency_limited (429 concurrency_limited), credits_exhausted (429 credits_exhausted) and cost_exceeds_limit (403)',
    labelNames: ['outcome'] as const,
    registers: [registry],
  });
  const shadowRefusals = new Counter({
    name: 'rate_limit_shadow_refusals_total',
    help: 'Requests of keys in shadow mode served past their limits: the 429s enforcement would have answered',
    labelNames: ['plan'] as const,
    registers: [registry],
  });
  if (store instanceof FallbackStore) {
    const fallback = store;
    new Gauge({
      name: 'rate_limit_redis_fallback',
      help: '1 while Redis is unreachable and this instance limits from its own memory',
      registers: [registry],
      collect() {
        this.set(fallback.degraded ? 1 : 0);
      },
    });
  }
  return { decisions, shadowRefusals };
}
