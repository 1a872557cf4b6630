import type { FastifyReply } from 'fastify';
import { secondsUntil } from '../platform/errors.js';
import type { Decision, WindowUsage } from './stores/store.js';

/** On every response under /v1 (documented by v1/contract.ts). */
export const RATE_LIMIT_HEADERS = {
  'x-ratelimit-limit': { type: 'integer', description: 'Units allowed in the binding window (requests, unless an operation costs more)' },
  'x-ratelimit-remaining': { type: 'integer', description: 'Units left in the binding window' },
  'x-ratelimit-reset': { type: 'integer', description: 'Unix time (seconds) when the binding window resets, or a ban ends' },
  'ratelimit-policy': { type: 'string', description: 'Every window by name, shortest first, as in draft-ietf-httpapi-ratelimit-headers' },
  ratelimit: { type: 'string', description: 'What is left of every window and seconds until each resets, shortest first' },
} as const;

/** Units left in a window: none once it is spent (a sliding window's count may pass its limit as the previous window's share shrinks). */
const remaining = (window: WindowUsage) => Math.max(0, window.limit - window.used);

/**
 * The window X-RateLimit-* describe and a 429 names: of those without room for the operation's
 * cost, the last to have room again (waiting for an earlier one would not help); else the one
 * with the fewest units left, the shorter on a tie (windows come shortest first).
 */
export function bindingWindow({ windows }: Decision, cost = 1): WindowUsage {
  let binding = windows[0]!;
  let full: WindowUsage | undefined;
  for (const window of windows) {
    if (remaining(window) < cost && (!full || window.resetAt > full.resetAt)) full = window;
    if (remaining(window) < remaining(binding)) binding = window;
  }
  return full ?? binding;
}

/** A window as a message names it: "minute" and "day" for the plans' own, else its name and length. */
export const windowPhrase = ({ name, windowSeconds }: Pick<WindowUsage, 'name' | 'windowSeconds'>) =>
  (name === 'minute' && windowSeconds === 60) || (name === 'day' && windowSeconds === 86_400)
    ? name
    : `${name} window (${windowSeconds} s)`;

/**
 * X-RateLimit-* describe the binding window (bindingWindow). The IETF draft's RateLimit and
 * RateLimit-Policy fields list every window by name, shortest first. A ban's Reset is its end.
 */
export function setHeaders(reply: FastifyReply, decision: Decision, now: number, cost = 1): WindowUsage {
  const binding = bindingWindow(decision, cost);
  const banned = decision.outcome === 'banned';
  let policy = '';
  let left = '';
  for (const window of decision.windows) {
    const separator = policy === '' ? '' : ', ';
    policy += `${separator}"${window.name}";q=${window.limit};w=${window.windowSeconds}`;
    left += `${separator}"${window.name}";r=${banned ? 0 : remaining(window)};t=${secondsUntil(window.resetAt - now)}`;
  }
  reply.headers({
    'x-ratelimit-limit': binding.limit,
    'x-ratelimit-remaining': banned ? 0 : remaining(binding),
    'x-ratelimit-reset': Math.ceil((banned ? decision.bannedUntil : binding.resetAt) / 1000),
    'ratelimit-policy': policy,
    ratelimit: left,
  });
  return binding;
}
