import { randomUUID } from 'node:crypto';
import type { ApiKeyIdentity } from '../api-keys/identity.js';
import type { CreditsExhaustedEvent, CreditsLowEvent } from '../rate-limit/credits.js';

/** A usage event as its receiver gets it: the body of the POST, the same bytes on every attempt. */
export interface UsageEvent {
  /** Unique per event, the same on every attempt: a receiver drops one it has seen. */
  id: string;
  type: 'usage.threshold' | 'key.banned' | 'credits.refilled' | 'credits.exhausted' | 'credits.low';
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
export function creditsExhausted(exhausted: CreditsExhaustedEvent, now: number): RecordedEvent {
  return {
    event: newEvent('credits.exhausted', now, balanceData(exhausted)),
    dedupeKey: `credits.exhausted:${exhausted.balance.id}:${exhausted.version}`,
  };
}

/** The data of credits.exhausted, which credits.low shares: the balance, whose it is, and the key whose request told it. */
const balanceData = ({ key, owner, balance, remaining }: CreditsExhaustedEvent) => ({
  keyId: key.id,
  quotaId: key.quotaId,
  customerId: key.customerId,
  owner,
  balanceId: balance.id,
  remaining,
  refillAt: balance.refillAt === null ? null : new Date(balance.refillAt).toISOString(),
});

/**
 * A balance of prepaid credits fell below `threshold` percent of its amount (its base: what it was last set or
 * refilled to, moved by increments and decrements), once per balance, version and threshold: credits.exhausted's
 * data, with the threshold and the amount its remaining is a part of.
 */
export function creditsLow(event: CreditsLowEvent, now: number): RecordedEvent {
  return {
    event: newEvent('credits.low', now, { ...balanceData(event), amount: event.balance.base, threshold: event.threshold }),
    dedupeKey: `credits.low:${event.balance.id}:${event.version}:${event.threshold}`,
  };
}
