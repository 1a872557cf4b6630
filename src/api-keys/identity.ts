import type { Limits, Plan } from './plans.js';

/** A customer's limits: one minute, one day and, if set, one concurrency limit, shared by all its keys. */
export interface CustomerLimits extends Limits {
  /** Requests in flight across all its keys at once; null for no such limit. */
  concurrency: number | null;
}

/** What a request learns from its key: who it is and what it may do. */
export interface ApiKeyIdentity extends Limits {
  id: number;
  /** The rate-limit quota the key counts in: shared by every key rotated from the same first key. */
  quotaId: number;
  plan: Plan;
  readOnly: boolean;
  /** When the key stops working, in ms since the epoch; null for never. */
  expiresAt: number | null;
  /** False in shadow mode: past its limits it is served, and counted as a would-be refusal. */
  enforceLimits: boolean;
  /** Its own limit of requests in flight; null for its plan's. */
  concurrency: number | null;
  /** The customer the key belongs to (set at creation, kept by rotation); null for none. */
  customerId: number | null;
  /** Its customer's limits, which bind it with the customer's other keys; null without a customer or limits. */
  customerLimits: CustomerLimits | null;
}
