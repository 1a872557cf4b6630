import fp from 'fastify-plugin';
import { PlanCache, type PlanOverrides } from './plan-cache.js';
import type { PlanBook } from './ports.js';
import type { PlanRecord } from './repository.js';
import { createPlansRepository } from './repository.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** Every plan, in memory, kept current by the plan_changed notices: a change anywhere shows here within a second. */
    plans: PlanBook;
  }
}

export interface PlansOptions extends PlanOverrides {
  /**
   * RATE_LIMIT_CONCURRENCY's default, by plan: a plan it names with its default value is not warned
   * about at start unless its row says otherwise (an operator who never set the setting has nothing to move).
   */
  defaultConcurrency?: Readonly<Record<string, number>>;
}

/** How to stop a setting overriding the plans' rows, as the warnings at start say it. */
const HOW_TO_MOVE = {
  RATE_LIMIT_SHADOW_PLANS: (name: string) =>
    `PATCH /admin/v1/plans/${name} {"shadow": true} (the admin API), then take ${name} out of RATE_LIMIT_SHADOW_PLANS`,
  RATE_LIMIT_CONCURRENCY: (name: string, value: number | boolean) =>
    `PATCH /admin/v1/plans/${name} {"concurrency": ${String(value)}} (the admin API), then take ${name} out of RATE_LIMIT_CONCURRENCY (off when it names no plan)`,
};

/** The warnings of the plans a setting overrides, one per plan and setting. */
function overridden(rows: PlanRecord[], { shadowPlans, concurrency, defaultConcurrency = {} }: PlansOptions) {
  const rowOf = (name: string) => rows.find((row) => row.name === name);
  const shadow = shadowPlans.map((name) => ({ setting: 'RATE_LIMIT_SHADOW_PLANS' as const, name, value: true, row: rowOf(name)?.shadow }));
  const inFlight = Object.entries(concurrency)
    .map(([name, value]) => ({ setting: 'RATE_LIMIT_CONCURRENCY' as const, name, value, row: rowOf(name)?.concurrency }))
    // The setting's default for a plan whose row holds no other limit: nothing the operator set, nothing to move yet.
    .filter(({ name, value, row }) => value !== defaultConcurrency[name] || (row !== undefined && row !== null && row !== value));
  return [...shadow, ...inFlight];
}

/**
 * The plan book (`app.plans`): every plan read at start, then again on every plan_changed notice
 * (migrations/019) and whenever the listening connection is back (notices sent meanwhile are lost).
 * RATE_LIMIT_SHADOW_PLANS and RATE_LIMIT_CONCURRENCY keep working: where they name a plan they win
 * over its row, and the start warns of each such plan, saying how to move the setting into the row.
 */
export default fp<PlansOptions>(
  async function plans(app, options) {
    const repository = createPlansRepository(app.db);
    const book = new PlanCache(
      () => repository.all(),
      options,
      (error) => app.log.warn({ err: error }, 'plans: reading the plans failed; the plans held stay until the next change notice'),
    );
    // Listening first, so that no change made while the plans are read is missed.
    const stopListening = await app.db.listen(
      'plan_changed',
      () => void book.reload(),
      () => void book.reload(),
    );
    app.addHook('onClose', stopListening);
    const rows = await book.start();
    for (const { setting, name, value, row } of overridden(rows, options)) {
      app.log.warn(
        { setting, plan: name, value, row: row ?? null },
        `${setting} sets the ${name} plan's ${setting === 'RATE_LIMIT_SHADOW_PLANS' ? 'shadow mode' : 'concurrency'} to ${value}, ` +
          `overriding its row (${row === undefined ? 'no such plan' : String(row)}); to move it: ${HOW_TO_MOVE[setting](name, value)}`,
      );
    }
    app.decorate('plans', book);
  },
  { name: 'plans', dependencies: ['database'] },
);
