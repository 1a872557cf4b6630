import type { Limits } from '../plans/limits.js';

/** A customer's limits: its windows and, if set, one concurrency limit, shared by all its keys. */
export interface CustomerLimits {
  limits: Limits;
  /** Requests in flight across all its keys at once; null for no such limit. */
  concurrency: number | null;
}

/**
 * A balance of prepaid credits, as the key's lookup reads it (credit_balances): the limiter decides
 * what remains of it (base less what was spent in this version) in its store, with the windows.
 */
export interface CreditBalance {
  id: number;
  /** The balance this version started with, moved by increments and decrements. */
  base: number;
  /** A new one on every set and refill, when spending starts again from 0. */
  version: number;
  /** When its next refill is due, in ms since the epoch; null without a refill. */
  refillAt: number | null;
}

/** What a request learns from its key: who it is and what it may do. */
export interface ApiKeyIdentity {
  id: number;
  /** The rate-limit quota the key counts in: shared by every key rotated from the same first key. */
  quotaId: number;
  /** The name of its plan (plans), whose windows, concurrency and shadow mode it takes unless it has its own. */
  plan: string;
  /** Its own windows, which replace its plan's; null: its plan's. */
  limits: Limits | null;
  readOnly: boolean;
  /** The web origins it may be used from (a browser key: a request without one of them in Origin is refused); null for any. */
  allowedOrigins: string[] | null;
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
  /** The prepaid credits of its quota (kept by rotation); null for none. */
  credits: CreditBalance | null;
  /** Its customer's prepaid credits, which all the customer's keys spend from; null without a customer or credits. */
  customerCredits: CreditBalance | null;
}
