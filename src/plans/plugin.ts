import fp from 'fastify-plugin';
import { InvalidSettingError } from '../platform/config/errors.js';
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

export type PlansOptions = PlanOverrides;

/** How to stop a setting overriding the plans' rows, as the warnings at start say it. */
const HOW_TO_MOVE = {
  RATE_LIMIT_SHADOW_PLANS: (name: string) =>
    `PATCH /admin/v1/plans/${name} {"shadow": true} (the admin API), then take ${name} out of RATE_LIMIT_SHADOW_PLANS`,
  RATE_LIMIT_CONCURRENCY: (name: string, value: number | boolean | null) =>
    `PATCH /admin/v1/plans/${name} {"concurrency": ${String(value)}} (the admin API), then unset RATE_LIMIT_CONCURRENCY once every plan's row holds what it says`,
};

/** The warnings of the plans a setting overrides, one per plan and setting. */
function overridden(rows: PlanRecord[], { shadowPlans, concurrency }: PlansOptions) {
  const rowOf = (name: string) => rows.find((row) => row.name === name);
  const shadow = shadowPlans.map((name) => ({ setting: 'RATE_LIMIT_SHADOW_PLANS' as const, name, value: true, row: rowOf(name)?.shadow }));
  // Set, it decides every plan (one it does not name has none): each row it differs from is overridden.
  const inFlight = rows
    .map((row) => ({
      setting: 'RATE_LIMIT_CONCURRENCY' as const,
      name: row.name,
      value: concurrency?.[row.name] ?? null,
      row: row.concurrency,
    }))
    .filter(({ value, row }) => concurrency !== null && value !== row);
  return [...shadow, ...inFlight];
}

/** At start, as before plans were rows: a setting naming a plan that is none stops it. */
function checkNamedPlans(rows: PlanRecord[], { shadowPlans, concurrency }: PlansOptions) {
  const names = new Set(rows.map((row) => row.name));
  for (const [setting, named] of [
    ['RATE_LIMIT_SHADOW_PLANS', shadowPlans],
    ['RATE_LIMIT_CONCURRENCY', Object.keys(concurrency ?? {})],
  ] as const) {
    const unknown = named.filter((name) => !names.has(name));
    if (unknown.length > 0) throw new InvalidSettingError(setting, `no plan ${unknown.join(', ')}; the plans are ${[...names].join(', ')}`);
  }
}

/**
 * The plan book (`app.plans`): every plan read at start, then again on every plan_changed notice
 * (migrations/019) and whenever the listening connection is back (notices sent meanwhile are lost).
 * RATE_LIMIT_SHADOW_PLANS and RATE_LIMIT_CONCURRENCY keep working as they did: a plan the first names
 * is in shadow mode whatever its row says; the second, set, decides every plan's concurrency (none
 * for a plan it does not name). The start warns of each plan whose row they override, saying how to move.
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
    checkNamedPlans(rows, options);
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
