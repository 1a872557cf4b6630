import type { Limits } from './limits.js';

/** A plan as the limiter applies it to a key of it that carries no limits of its own. */
export interface PlanPolicy {
  name: string;
  /** Its windows; null for a plan whose keys each carry their own (enterprise). */
  limits: Limits | null;
  /** Requests a key of it may have in flight at once; null for no such limit. */
  concurrency: number | null;
  /** True: past its limits a key of the plan is served with a refusal's headers (shadow mode). */
  shadow: boolean;
}

/** The plans every instance holds in memory, kept current by the plans' change notices (within a second of a change). */
export interface PlanBook {
  /** The plan so named; undefined for none (deleted, or never made). */
  get(name: string): PlanPolicy | undefined;
  /** Every plan, by name. */
  all(): PlanPolicy[];
}
