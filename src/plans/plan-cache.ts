import type { PlanBook, PlanPolicy } from './ports.js';
import type { PlanRecord } from './repository.js';

/** The settings that configured plans before the plans' rows did: where they name a plan, they win over its row. */
export interface PlanOverrides {
  /** RATE_LIMIT_SHADOW_PLANS: these plans are in shadow mode whatever their rows say. */
  shadowPlans: readonly string[];
  /** RATE_LIMIT_CONCURRENCY: requests in flight by plan, a plan not named without a limit, over every row; null when unset (the rows decide). */
  concurrency: Readonly<Record<string, number>> | null;
}

/** A plan's row as the limiter applies it: the settings merged over it. */
export function policyOf({ name, limits, concurrency, shadow }: PlanRecord, overrides: PlanOverrides): PlanPolicy {
  return {
    name,
    limits,
    concurrency: overrides.concurrency ? (overrides.concurrency[name] ?? null) : concurrency,
    shadow: shadow || overrides.shadowPlans.includes(name),
  };
}

/**
 * Every plan in memory, read whole from the plans table at start and again on each change notice
 * (and each time the listening connection is back, since notices may have been lost): a handful of
 * rows, so a reload reads them all. Reloads may overlap; only the last started is kept, so an older
 * read never replaces a newer one.
 */
export class PlanCache implements PlanBook {
  #plans = new Map<string, PlanPolicy>();
  #started = 0;
  #applied = 0;

  constructor(
    private readonly load: () => Promise<PlanRecord[]>,
    private readonly overrides: PlanOverrides,
    private readonly onError: (error: unknown) => void,
  ) {}

  get(name: string): PlanPolicy | undefined {
    return this.#plans.get(name);
  }

  all(): PlanPolicy[] {
    return [...this.#plans.values()];
  }

  /** Reads every plan again; a failed read keeps the plans held (and is told to onError) until the next notice. */
  async reload(): Promise<void> {
    await this.start().catch(this.onError);
  }

  /** The first read, at start: unlike a reload, its failure stops the start. Resolves to the rows read. */
  async start(): Promise<PlanRecord[]> {
    const seq = ++this.#started;
    const rows = await this.load();
    if (seq > this.#applied) {
      this.#applied = seq;
      this.#plans = new Map(rows.map((row) => [row.name, policyOf(row, this.overrides)]));
    }
    return rows;
  }
}
