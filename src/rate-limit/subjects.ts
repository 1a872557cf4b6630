import { minuteAndDay, type Limits } from '../plans/limits.js';
import type { ApiKeyIdentity } from '../api-keys/identity.js';

/** The subject a customer's limits count in, shared by all its keys. */
export const customerSubject = (customerId: number) => `customer:${customerId}`;
/** What names a key's subject: its quota and its customer. */
export type KeyQuota = Pick<ApiKeyIdentity, 'quotaId' | 'customerId'>;

/**
 * The subject a key counts as: its quota, which the keys rotated from one another share. A
 * customer's key starts with its customer's subject in braces, the Redis Cluster hash tag both
 * subjects' keys then share (see RedisStore's naming), so one script can decide both. A key's
 * customer is set at its creation and kept by rotation, so its subject never changes.
 */
export const keySubject = ({ quotaId, customerId }: KeyQuota) =>
  customerId === null ? `key:${quotaId}` : `{${customerSubject(customerId)}}key:${quotaId}`;
/** The subject a caller without a valid key counts as: its client address (see clientOf). */
export const addressSubject = (client: string) => `ip:${client}`;
/** The subject a key's quota lookups count as. */
export const lookupSubject = (quotaId: number) => `lookups:${quotaId}`;

/**
 * Callers without a valid key are limited by address, as the seed's Free plan (fixed here, not
 * its row: an operator's change of a plan moves no address's limits), so keys cannot be guessed at speed.
 */
export const ANONYMOUS: Limits = minuteAndDay(60, 1_000);
