import type { Limits, Plan } from './plans.js';

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
}
