import { minuteAndDay, type Limits } from '../plans/limits.js';
import type { PlanBook } from '../plans/ports.js';
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
/** The subject a key's calls of a free operation (free-calls.ts) count as, each operation's apart. */
export const freeCallSubject = (operationId: string, quotaId: number) => `free:${operationId}:${quotaId}`;

/**
 * Callers without a valid key are limited by address, as the seed's Free plan (fixed here, not
 * its row: an operator's change of a plan moves no address's limits), so keys cannot be guessed at speed.
 */
export const ANONYMOUS: Limits = minuteAndDay(60, 1_000);

/** What the limiter applies to a key: its windows, whether past them it is served (shadow mode), its limit of requests in flight. */
export interface KeyPolicy {
  limits: Limits;
  shadow: boolean;
  /** Undefined for none. */
  concurrency: number | undefined;
}

/**
 * A key's own windows, else its plan's; shadow mode when the key enforces none or its plan is in
 * shadow; its own concurrency limit, else its plan's. A key whose plan is gone (deleted once no
 * working key had it) or has no windows, and which has none of its own, counts as an address does.
 */
export function keyPolicy(plans: PlanBook, key: Pick<ApiKeyIdentity, 'plan' | 'limits' | 'enforceLimits' | 'concurrency'>): KeyPolicy {
  const plan = plans.get(key.plan);
  return {
    limits: key.limits ?? plan?.limits ?? ANONYMOUS,
    shadow: !key.enforceLimits || plan?.shadow === true,
    concurrency: key.concurrency ?? plan?.concurrency ?? undefined,
  };
}
