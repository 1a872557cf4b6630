import { PLAN_LIMITS, type Limits } from '../api-keys/plans.js';

/** The subject a key counts as: its quota, which the keys rotated from one another share. */
export const keySubject = (quotaId: number) => `key:${quotaId}`;
/** The subject a caller without a valid key counts as: its client address (see clientOf). */
export const addressSubject = (client: string) => `ip:${client}`;
/** The subject a key's quota lookups count as. */
export const lookupSubject = (quotaId: number) => `lookups:${quotaId}`;

/** Callers without a valid key are limited by address, as the Free plan, so keys cannot be guessed at speed. */
export const ANONYMOUS: Limits = PLAN_LIMITS.free;
