import { randomUUID } from 'node:crypto';
import type { ApiKeyIdentity } from '../api-keys/identity.js';
import type { CreditsExhaustedEvent } from '../rate-limit/credits.js';

/** A usage event as its receiver gets it: the body of the POST, the same bytes on every attempt. */
export interface UsageEvent {
  /** Unique per event, the same on every attempt: a receiver drops one it has seen. */
  id: string;
  type: 'usage.threshold' | 'key.banned' | 'credits.refilled' | 'credits.exhausted';
  createdAt: string;
  data: Record<string, unknown>;
}

/** An event and what makes it once across all instances: its type, quota, window and threshold (or ban). */
export interface RecordedEvent {
  event: UsageEvent;
  dedupeKey: string;
}

const newEvent = (type: UsageEvent['type'], now: number, data: Record<string, unknown>): UsageEvent => ({
  id: randomUUID(),
  type,
  createdAt: new Date(now).toISOString(),
  data,
});

/** A key's window took it to `threshold` percent of its limit, or past it. */
export function usageThreshold(
  {
    key,
    window,
    windowStart,
    limit,
    used,
    threshold,
    resetAt,
  }: { key: ApiKeyIdentity; window: string; windowStart: number; limit: number; used: number; threshold: number; resetAt: number },
  now: number,
): RecordedEvent {
  return {
    event: newEvent('usage.threshold', now, {
      keyId: key.id,
      quotaId: key.quotaId,
      plan: key.plan,
      window,
      limit,
      used,
      threshold,
      resetAt: new Date(resetAt).toISOString(),
    }),
    dedupeKey: `usage.threshold:${key.quotaId}:${window}:${windowStart}:${threshold}`,
  };
}

/** A key's refusals started a ban, ending at `bannedUntil`. */
export function keyBanned({ key, bannedUntil }: { key: ApiKeyIdentity; bannedUntil: number }, now: number): RecordedEvent {
  return {
    event: newEvent('key.banned', now, { keyId: key.id, quotaId: key.quotaId, bannedUntil: new Date(bannedUntil).toISOString() }),
    dedupeKey: `key.banned:${key.quotaId}:${bannedUntil}`,
  };
}

/** A balance was refilled (src/credits/plugin.ts): its version `version` starts from `remaining`, until `refillAt`. */
export function creditsRefilled(
  {
    balanceId,
    owner,
    version,
    remaining,
    refillAt,
  }: { balanceId: number; owner: { customerId: number } | { quotaId: number }; version: number; remaining: number; refillAt: number },
  now: number,
): RecordedEvent {
  return {
    event: newEvent('credits.refilled', now, {
      // Named as credits.exhausted names its balance, so a receiver reads both events alike.
      owner: 'customerId' in owner ? 'customer' : 'key',
      balanceId,
      ...owner,
      remaining,
      refillAt: new Date(refillAt).toISOString(),
    }),
    dedupeKey: `credits.refilled:${balanceId}:${version}`,
  };
}

/**
 * A balance of prepaid credits ran out (a request left it none, or was refused for it): the key's
 * own (`owner` key) or its customer's, once per balance and version (each set or refill starts one).
 */
export function creditsExhausted({ key, owner, balance, version, remaining }: CreditsExhaustedEvent, now: number): RecordedEvent {
  return {
    event: newEvent('credits.exhausted', now, {
      keyId: key.id,
      quotaId: key.quotaId,
      customerId: key.customerId,
      owner,
      balanceId: balance.id,
      remaining,
      refillAt: balance.refillAt === null ? null : new Date(balance.refillAt).toISOString(),
    }),
    dedupeKey: `credits.exhausted:${balance.id}:${version}`,
  };
}
