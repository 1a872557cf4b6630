import { createHash, randomUUID } from 'node:crypto';
import type { ApiKeyIdentity } from '../api-keys/identity.js';
import type { CreditsExhaustedEvent, CreditsLowEvent } from '../rate-limit/credits.js';
import type { ExportedHour } from '../usage/export-repository.js';

/** A usage event as its receiver gets it: the body of the POST, the same bytes on every attempt. */
export interface UsageEvent {
  /** Unique per event, the same on every attempt: a receiver drops one it has seen. */
  id: string;
  type: 'usage.threshold' | 'key.banned' | 'credits.refilled' | 'credits.exhausted' | 'credits.low';
  createdAt: string;
  data: Record<string, unknown>;
}

/**
 * A `usage.hourly` event: a CloudEvents 1.0 envelope, POSTed as the body itself (structured mode), so that a
 * receiver may hand it on to a CloudEvents ingest (OpenMeter's) as it came. Its id is the same on every
 * revision and re-send of its hour: a receiver keeps the newest revision.
 */
export interface UsageHourlyEvent {
  specversion: '1.0';
  id: string;
  source: string;
  type: 'usage.hourly';
  subject: string;
  time: string;
  datacontenttype: 'application/json';
  data: Record<string, unknown>;
}

/** An event's type, whichever its shape. */
export type EventType = UsageEvent['type'] | UsageHourlyEvent['type'];

/** The media type an event's body is POSTed as: CloudEvents' structured mode for usage.hourly, plain JSON for the others. */
export const contentTypeOf = (type: EventType) =>
  type === 'usage.hourly' ? 'application/cloudevents+json; charset=utf-8' : 'application/json';

/** An event and what makes it once across all instances: its type, quota, window and threshold (or ban), or hour and revision. */
export interface RecordedEvent {
  event: UsageEvent | UsageHourlyEvent;
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
 * A balance of prepaid credits fell below `threshold` percent of its amount (its base: what it was last set,
 * refilled or decremented to, moved by increments), once per balance, version and threshold: credits.exhausted's
 * data, with the threshold and the amount its remaining is a part of.
 */
export function creditsLow(event: CreditsLowEvent, now: number): RecordedEvent {
  return {
    event: newEvent('credits.low', now, { ...balanceData(event), amount: event.balance.base, threshold: event.threshold }),
    dedupeKey: `credits.low:${event.balance.id}:${event.version}:${event.threshold}`,
  };
}

/** The namespace of usage.hourly ids (a UUID of our own): with it, anyone derives an hour's id from its name. */
const USAGE_HOURLY_NAMESPACE = Buffer.from('5e4f1a2c9b3d4e8fa6c7d8e9f0a1b2c3', 'hex');

/** RFC 9562's name-based UUID (version 5, SHA-1) of `name` in `namespace` (16 bytes): the same name, the same id, everywhere. */
export function nameBasedUuid(namespace: Buffer, name: string): string {
  const hash = createHash('sha1').update(namespace).update(name).digest();
  hash[6] = (hash[6]! & 0x0f) | 0x50;
  hash[8] = (hash[8]! & 0x3f) | 0x80;
  const hex = hash.subarray(0, 16).toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/**
 * The usage of a customer (or of a key without one) of one operation in one closed hour, at its revision. Once per
 * revision across all instances; a re-send (`sendId`, a backfill's) is recorded again, with the same id and revision.
 */
export function usageHourly(exported: ExportedHour, source: string, sendId?: string): RecordedEvent {
  const { hour, subject, operation, customerId, externalId, keyId, revision, requests, units, refused } = exported;
  const start = new Date(hour).toISOString();
  const name = `${subject}/${operation}/${start}`;
  return {
    event: {
      specversion: '1.0',
      id: nameBasedUuid(USAGE_HOURLY_NAMESPACE, name),
      source,
      type: 'usage.hourly',
      subject: externalId ?? subject,
      time: start,
      datacontenttype: 'application/json',
      data: { customerId, externalId, keyId, operation: operation || null, hour: start, requests, units, refused, revision },
    },
    dedupeKey: `usage.hourly:${name}:${revision}${sendId === undefined ? '' : `:${sendId}`}`,
  };
}
