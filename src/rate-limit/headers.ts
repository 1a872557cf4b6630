import type { FastifyReply } from 'fastify';
import { secondsUntil } from '../platform/errors.js';
import type { Decision, WindowUsage } from './stores/store.js';

/** On every response under /v1 (documented by v1/contract.ts). */
export const RATE_LIMIT_HEADERS = {
  'x-ratelimit-limit': { type: 'integer', description: 'Units allowed in the binding window (requests, unless an operation costs more)' },
  'x-ratelimit-remaining': { type: 'integer', description: 'Units left in the binding window' },
  'x-ratelimit-reset': { type: 'integer', description: 'Unix time (seconds) when the binding window resets, or a ban ends' },
  'ratelimit-policy': { type: 'string', description: 'Both windows, as in draft-ietf-httpapi-ratelimit-headers' },
  ratelimit: { type: 'string', description: 'What is left of both windows and seconds until each resets' },
} as const;

/**
 * X-RateLimit-* describe the binding window: the one with fewer units left (the minute on a tie,
 * the day once it has no room for the operation's cost, since retrying after the minute would not
 * help). The IETF draft's RateLimit and RateLimit-Policy fields describe both. A ban's Reset is its end.
 */
export function setHeaders(reply: FastifyReply, decision: Decision, now: number, cost = 1): WindowUsage {
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
