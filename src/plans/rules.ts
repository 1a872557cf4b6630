import { recordAudit, type Actor, type ChangeOptions } from '../audit/repository.js';
import { atomically, type Database, type Queryable } from '../platform/db/database.js';
import { PlanInUseError } from './errors.js';
import { checkedWindows } from './windows.js';
import { normalizeLimits, type LimitWindow } from './limits.js';
import { createPlansRepository, lockPlanRow, type PlanRecord, type PlanSettings } from './repository.js';

/** A plan as a create takes it: its name and windows (null: its keys carry their own), by default no concurrency limit and no shadow mode. */
export interface PlanToCreate {
  name: string;
  limits: LimitWindow[] | null;
  concurrency?: number | null;
  shadow?: boolean;
}

/** The settings of a plan a change may set; absent ones keep their value (null limits: its keys carry their own; null concurrency: none). */
export interface PlanChange {
  limits?: LimitWindow[] | null;
  concurrency?: number | null;
  shadow?: boolean;
}

/** A change with its audit entry: made by someone, always recorded. */
type RecordedChange = Pick<ChangeOptions, 'tx'> & { actor: Actor };

/** The settings as an audit entry records them. */
const settingsOf = ({ limits, concurrency, shadow }: PlanSettings): PlanSettings => ({ limits, concurrency, shadow });

const same = (a: PlanSettings, b: PlanSettings) =>
  a.concurrency === b.concurrency && a.shadow === b.shadow && JSON.stringify(a.limits) === JSON.stringify(b.limits);

/**
 * The plan so named, locked FOR SHARE until the caller's transaction ends (undefined for none): the
 * key rules call it before they make or move a key onto a plan, so that a delete of the plan (which
 * locks it FOR UPDATE, then counts its working keys) and the new key cannot both commit.
 */
export const lockPlan = (tx: Queryable, name: string): Promise<PlanRecord | undefined> => lockPlanRow(tx, name);

/**
 * What may be done to a plan, and the audit entry of each change, in one transaction with it (the
 * caller's, for an Idempotency-Key, or one of its own). Each change reaches every instance's plan
 * book through the plan_changed notices (migrations/019).
 */
export function createPlanRules(db: Database, costs: Record<string, number>) {
  const plans = createPlansRepository(db);

  /** A PlanInUseError when working keys have the plan (those on its windows only, for a change of them; what: the refusal's end). */
  async function refuseInUse(tx: Queryable, name: string, what: string, options?: { onItsWindows: boolean }) {
    const keys = await plans.workingKeys(tx, name, options);
    if (keys > 0) throw new PlanInUseError(name, keys, what);
  }

  return {
    /**
     * Windows as a body gives them, checked where the schema cannot (checkedWindows: names unique,
     * each the dearest operation's cost): touches no database, so a request is refused before its
     * Idempotency-Key is claimed.
     */
    checkLimits(windows: readonly LimitWindow[] | null | undefined): void {
      if (windows) checkedWindows(windows, costs);
    },

    /** Stores a plan; a PlanNameTakenError when one has its name. */
    create: ({ name, limits, concurrency = null, shadow = false }: PlanToCreate, { tx, actor }: RecordedChange): Promise<PlanRecord> =>
      atomically(db, tx, async (target) => {
        const plan = await plans.insert(target, name, { limits: limits && normalizeLimits(limits), concurrency, shadow });
        await recordAudit(target, actor, 'plan.create', null, { plan: name, ...settingsOf(plan) });
        return plan;
      }),

    /** Every plan, by name. */
    list: () => plans.all(),

    get: (name: string) => plans.get(name),

    /**
     * Changes a plan's limits, concurrency or shadow mode, with its audit entry (before and after); a
     * change to what it already is changes and records nothing. Undefined when there is no such plan;
     * a PlanInUseError when its limits would go while working keys of it carry none of their own.
     */
    update: (name: string, change: PlanChange, { actor }: Pick<RecordedChange, 'actor'>): Promise<PlanRecord | undefined> =>
      db.transaction(async (tx) => {
        const before = await plans.lockForChange(tx, name);
        if (!before) return undefined;
        const after: PlanSettings = {
          limits: change.limits === undefined ? before.limits : change.limits && normalizeLimits(change.limits),
          concurrency: change.concurrency === undefined ? before.concurrency : change.concurrency,
          shadow: change.shadow ?? before.shadow,
        };
        if (same(before, after)) return before;
        if (after.limits === null && before.limits !== null) {
          await refuseInUse(tx, name, 'its limits stay until none works without limits of its own', { onItsWindows: true });
        }
        const updated = await plans.update(tx, name, after);
        await recordAudit(tx, actor, 'plan.update', null, { plan: name, before: settingsOf(before), after: settingsOf(updated) });
        return updated;
      }),

    /** Deletes a plan, with its audit entry; false when there is none; a PlanInUseError while working keys have it. */
    delete: (name: string, { actor }: Pick<RecordedChange, 'actor'>): Promise<boolean> =>
      db.transaction(async (tx) => {
        const before = await plans.lockForChange(tx, name);
        if (!before) return false;
        await refuseInUse(tx, name, 'revoke them or move them to another plan first');
        await plans.delete(tx, name);
        await recordAudit(tx, actor, 'plan.delete', null, { plan: name, before: settingsOf(before) });
        return true;
      }),
  };
}

export type PlanRules = ReturnType<typeof createPlanRules>;
