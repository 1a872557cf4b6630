import { errors, secondsUntil, type ApiError } from '../platform/errors.js';
import { minuteAndDay } from '../plans/limits.js';
import { bindingWindow } from './headers.js';
import { clientOf } from './address.js';
import { MemoryStore } from './stores/memory-store.js';

/**
 * Keys an instance has not seen are looked up in the database at most this often per address, so
 * a flood of made-up keys (with valid checksums) never lands on the database. Counted per
 * instance, apart from the request limits: a valid key's first request costs its caller nothing.
 */
export const LOOKUPS = minuteAndDay(60, 10_000);

/** Whether a key may be looked up: not when its client is banned (its request is refused as banned), nor past the budget (the 429). */
export type LookupSpent = { lookUp: true } | { lookUp: false; refusal?: ApiError };

export interface LookupBudget {
  /** Spends one lookup of the client an address counts as, or says when the next one may be made (the 429). */
  spend(address: string, now: number): Promise<LookupSpent>;
  close(): Promise<void>;
}

/** The lookups each client (see clientOf) may spend on keys this instance does not know, in this process's memory. */
export function createLookupBudget({ ipv6Prefix, now }: { ipv6Prefix: number; now: () => number }): LookupBudget {
  // Counting only: a client past its budget is refused lookups, never banned for it.
  const spent = new MemoryStore({ threshold: Number.MAX_SAFE_INTEGER, durationMs: 0 }, { now });
  return {
    async spend(address, at) {
      const budget = await spent.consume(clientOf(address, ipv6Prefix), LOOKUPS, at, 1, true);
      if (budget.outcome === 'allowed') return { lookUp: true };
      return { lookUp: false, refusal: errors.tooManyUnknownKeys(secondsUntil(bindingWindow(budget).resetAt - at)) };
    },
    close: () => spent.close(),
  };
}
