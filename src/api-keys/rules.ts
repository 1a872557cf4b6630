import { recordAudit, type ChangeOptions } from '../audit/repository.js';
import { createCreditsRepository, type CreditsChanged } from '../credits/repository.js';
import type { CreditsSetting } from '../credits/refill.js';
import { atomically, type Database, type Queryable } from '../platform/db/database.js';
import type { LimitWindow, Limits } from '../plans/limits.js';
import { MissingLimitsError, RevokedKeyError, RotatedKeyError, UnknownPlanError } from './errors.js';
import { parseExpiry } from './expiry.js';
import { DEFAULT_OVERLAP_SECONDS } from './lifecycle.js';
import { checkedWindows, limitOf, sameWindows, withShortForm } from '../plans/windows.js';
import type { ApiKeyRecord, ApiKeysRepository, IssuedApiKey, NewApiKey } from './repository.js';
import { lockPlan } from '../plans/rules.js';
import { checkedOrigins, sameOrigins } from './origins.js';
import type { PlanRecord } from '../plans/repository.js';

/** A plan as a key's rules read it: its windows, null for a plan whose keys each carry their own. */
type KeyPlan = Pick<PlanRecord, 'name' | 'limits'>;

/** The limits a create or a change gives: a list of windows (null: the plan's), and the short form of a minute and a day. */
export interface LimitsRequest {
  limits?: readonly LimitWindow[] | null;
  perMinute?: number;
  perDay?: number;
}

/** A key as the admin API's createKey and the keys command's create take it, before the rules checked it. */
export interface KeyRequest extends LimitsRequest {
  /** Any plan in the plans table (checked where the key is written). */
  plan: string;
  name?: string;
  expiresAt?: string;
  readOnly?: boolean;
  enforceLimits?: boolean;
  concurrency?: number | null;
  customerId?: number;
  /** The web origins it may be used from, checked by newKey (origins.ts); null or absent: any. */
  allowedOrigins?: readonly string[] | null;
}

/** A key to create, its expiry checked: its limits are checked with its plan, in the create's transaction. */
export type KeyToCreate = Omit<NewApiKey, 'limits'> & LimitsRequest;

/**
 * A change of a key's plan, limits, name, enforcement or origins; absent fields keep their value (a null concurrency is its
 * plan's, null limits its plan's windows, null origins any). A new plan with limits of its own takes the key back to them
 * unless the change gives limits.
 */
export interface ApiKeyChange extends LimitsRequest {
  plan?: string;
  name?: string;
  enforceLimits?: boolean;
  concurrency?: number | null;
  /** The web origins it may be used from (checked: origins.ts); null: any. */
  allowedOrigins?: readonly string[] | null;
  /** A set of the quota's credits (a new version from remaining, with this refill), or null to remove them. */
  credits?: CreditsSetting | null;
}

/** The credits before and after, in an audit entry, when a change set them. */
const creditsAudit = (changed: CreditsChanged | undefined, side: keyof CreditsChanged) => (changed ? { credits: changed[side] } : {});

/** An expiry as given, checked (parseExpiry): undefined for none; an expiry error (errors.ts) otherwise. */
export const expiryOf = (expiresAt: string | undefined, now: number): Date | undefined =>
  expiresAt === undefined ? undefined : parseExpiry(expiresAt, now);

/**
 * The key a request or a command line asks for, its expiry (in the future: an expiry error, errors.ts) and origins
 * (origins.ts) checked. Touches no database, so the keys command refuses bad arguments before it opens one; the plan and
 * limits are checked by the create.
 */
export function newKey({ expiresAt, allowedOrigins, ...settings }: KeyRequest, now: number): KeyToCreate {
  return { ...settings, expiresAt: expiryOf(expiresAt, now), allowedOrigins: allowedOrigins && checkedOrigins(allowedOrigins) };
}

/**
 * A key's own windows after a create or change gives `request`: a list given (checked: names unique, each the dearest
 * cost; null: the plan's), else `current`; then perMinute and perDay replace or add the windows named minute and day in
 * them (in the plan's when the key has none). A MissingLimitsError when a key of a plan without limits would have none.
 */
function ownLimitsOf(current: Limits | null, plan: KeyPlan, request: LimitsRequest, costs: Record<string, number>): Limits | null {
  const { limits: given, perMinute, perDay } = request;
  let own = given === undefined ? current : given && checkedWindows(given, costs);
  if (perMinute !== undefined || perDay !== undefined) own = withShortForm(own ?? plan.limits ?? [], { perMinute, perDay }, costs);
  if (own === null && plan.limits === null) throw new MissingLimitsError(plan.name);
  return own;
}

/** The ids of the other keys of the quota a change took along, when there are any (the audit entry's `sameQuota`). */
const sameQuotaOf = (id: number, ids: number[]) => {
  const others = ids.filter((other) => other !== id);
  return others.length > 0 ? { sameQuota: others } : {};
};

const ascending = (ids: number[]) => ids.sort((a, b) => a - b);

/** What an update may change, in the order its audit entry records them before and after. */
const SETTINGS = ['plan', 'limits', 'perMinute', 'perDay', 'name', 'enforceLimits', 'concurrency', 'allowedOrigins'] as const;
type KeySettings = Pick<ApiKeyRecord, (typeof SETTINGS)[number]>;

const settingsOf = ({ plan, limits, perMinute, perDay, name, enforceLimits, concurrency, allowedOrigins }: KeySettings): KeySettings => ({
  plan,
  limits,
  perMinute,
  perDay,
  name,
  enforceLimits,
  concurrency,
  allowedOrigins,
});

/** Each setting compared as what it is: lists of windows and of origins item by item. */
const sameSetting = (a: KeySettings, b: KeySettings, field: (typeof SETTINGS)[number]) =>
  field === 'limits'
    ? sameWindows(a.limits, b.limits)
    : field === 'allowedOrigins'
      ? sameOrigins(a.allowedOrigins, b.allowedOrigins)
      : a[field] === b[field];

const sameSettings = (a: KeySettings, b: KeySettings) => SETTINGS.every((field) => sameSetting(a, b, field));

/**
 * A key's settings once changed (absent fields keep their value) on `plan` (its plan after the change, locked); a limits
 * error (errors.ts) when a key of a plan without limits would have none, or new ones repeat a name or fall short of a cost.
 */
function settingsAfter(before: ApiKeyRecord, change: ApiKeyChange, plan: KeyPlan, costs: Record<string, number>): KeySettings {
  // A move to a plan with limits of its own takes its windows, unless the change gives limits; otherwise the key keeps its own.
  const current = plan.name !== before.plan && plan.limits !== null ? null : before.limits;
  const limits = ownLimitsOf(current, plan, change, costs);
  const windows = limits ?? plan.limits;
  return {
    plan: plan.name,
    limits,
    perMinute: limitOf(windows, 'minute'),
    perDay: limitOf(windows, 'day'),
    name: change.name ?? before.name,
    enforceLimits: change.enforceLimits ?? before.enforceLimits,
    concurrency: change.concurrency === undefined ? before.concurrency : change.concurrency,
    allowedOrigins:
      change.allowedOrigins === undefined ? before.allowedOrigins : change.allowedOrigins && checkedOrigins(change.allowedOrigins),
  };
}

/**
 * What may be done to a key, and the audit entry of each change, in one transaction with it: the
 * one place the admin API and the keys command change keys through, so the two cannot drift.
 * The repository holds the statements; changes reach every instance through the api_keys notices.
 * `costs` are RATE_LIMIT_COSTS: a key's own limits must fit every operation's cost.
 */
export function createKeyRules(db: Database, keys: ApiKeysRepository, costs: Record<string, number>) {
  const credits = createCreditsRepository(db);

  /** The plan so named, locked against a concurrent DELETE of it until the transaction ends; an UnknownPlanError for none. */
  async function planOf(tx: Queryable, name: string): Promise<KeyPlan> {
    const plan = await lockPlan(tx, name);
    if (!plan) throw new UnknownPlanError(name);
    return plan;
  }

  /** The key for a change, locked; undefined when there is none; a RevokedKeyError or RotatedKeyError when it is revoked or rotated. */
  async function changeable(tx: Queryable, id: number, instead: string): Promise<ApiKeyRecord | undefined> {
    const key = await keys.lockForChange(tx, id);
    if (!key) return undefined;
    if (key.revokedAt) throw new RevokedKeyError(id, instead);
    if (key.replacedBy !== null) throw new RotatedKeyError(id, key.replacedBy, instead);
    return key;
  }

  return {
    /**
     * Creates a key newKey checked, with the credits given (its quota's), and returns it with its secret; an UnknownPlanError
     * for a plan not in the plans table, a limits error (errors.ts) when its own limits repeat a name or fall short of an
     * operation's cost or a key of its plan needs some, an UnknownCustomerError when its customerId names no customer.
     */
    create: (key: KeyToCreate, { tx, actor, credits: setting }: ChangeOptions & { credits?: CreditsSetting } = {}): Promise<IssuedApiKey> =>
      atomically(db, tx, async (target) => {
        const { limits: given, perMinute: minute, perDay: day, ...fields } = key;
        const limits = ownLimitsOf(null, await planOf(target, key.plan), { limits: given, perMinute: minute, perDay: day }, costs);
        const issued = await keys.create({ ...fields, limits }, { tx: target });
        const changed = setting && (await credits.replace(target, { quotaId: issued.record.quotaId }, setting));
        if (actor) {
          const { plan, name, perMinute, perDay, expiresAt, readOnly, enforceLimits, concurrency, customerId, allowedOrigins } =
            issued.record;
          await recordAudit(target, actor, 'key.create', issued.id, {
            plan,
            name,
            limits: issued.record.limits,
            perMinute,
            perDay,
            expiresAt,
            readOnly,
            enforceLimits,
            concurrency,
            allowedOrigins,
            // Only a key of a customer says so: a key of its own is recorded as before customers were; so for credits.
            ...(customerId !== null && { customerId }),
            ...creditsAudit(changed, 'after'),
          });
        }
        return issued;
      }),

    /**
     * Replaces a key with a new one of the same plan, limits, name, scope, enforcement, origins, quota and customer; the old one
     * keeps working for `overlapSeconds` more (a day by default; never longer than it would have),
     * or stops at once for 0, and so do the keys rotated into it still in their overlap. Undefined
     * when there is no key with that id; a RevokedKeyError or RotatedKeyError for a revoked or rotated key.
     */
    rotate(
      id: number,
      { overlapSeconds = DEFAULT_OVERLAP_SECONDS, expiresAt }: { overlapSeconds?: number; expiresAt?: Date } = {},
      { actor }: Pick<ChangeOptions, 'actor'> = {},
    ) {
      return db.transaction(async (tx): Promise<IssuedApiKey | undefined> => {
        const old = await changeable(tx, id, 'create a new key instead');
        if (!old) return undefined;
        // A working key's plan is in the table (a plan in use cannot be deleted): locked all the same, as a create locks it.
        await lockPlan(tx, old.plan);
        const { plan, limits, name, readOnly, enforceLimits, concurrency, customerId, allowedOrigins } = old;
        const successor = { plan, limits, name, readOnly, enforceLimits, concurrency, customerId, allowedOrigins, expiresAt };
        const created = await keys.create(successor, { tx, quotaId: old.quotaId });
        const retired = await keys.retire(tx, id, created.id, overlapSeconds, old.quotaId);
        if (actor) {
          await recordAudit(tx, actor, 'key.rotate', id, { newKeyId: created.id, overlapSeconds, ...sameQuotaOf(id, ascending(retired)) });
        }
        return created;
      });
    },

    /**
     * Changes a key's plan, limits, name, enforcement (shadow mode, concurrency), origins or credits (its quota's: a set, or null to
     * remove them), effective wherever the key is cached as soon as the change notice arrives. All but the name are the quota's: the
     * keys rotated into this one and still in their overlap take them too, so a cut (or a binding to origins) binds every key
     * counting in the quota.
     * Undefined when there is no such key; an UnknownPlanError for a plan not in the plans table; a limits error when a key
     * of the plan needs limits, or new ones repeat a name or an operation costs more than them; an origin error (origins.ts)
     * for an origin not as browsers send it or listed twice; a RevokedKeyError or RotatedKeyError for a revoked or rotated key.
     */
    update(id: number, change: ApiKeyChange, { actor }: Pick<ChangeOptions, 'actor'> = {}) {
      return db.transaction(async (tx): Promise<ApiKeyRecord | undefined> => {
        const before = await changeable(tx, id, 'change its successor, or create a new key');
        if (!before) return undefined;
        const after = settingsAfter(before, change, await planOf(tx, change.plan ?? before.plan), costs);
        const same = sameSettings(after, before);
        if (same && change.credits === undefined) return before;
        const updated = same ? [before] : await keys.updateQuota(tx, id, { ...after, quotaId: before.quotaId });
        let changed: CreditsChanged | undefined;
        if (change.credits !== undefined) {
          // The quota's first key too: a credits operation through another key of the quota waits, so `before` is exact.
          await credits.lockQuota(tx, id);
          changed = await credits.replace(tx, { quotaId: before.quotaId }, change.credits);
        }
        if (actor) {
          await recordAudit(tx, actor, 'key.update', id, {
            before: { ...settingsOf(before), ...creditsAudit(changed, 'before') },
            after: { ...after, ...creditsAudit(changed, 'after') },
            ...sameQuotaOf(
              id,
              updated.map((key) => key.id),
            ),
          });
        }
        return updated.find((key) => key.id === id)!;
      });
    },

    /**
     * Revokes a key, and the keys rotated into it that still work (a cancellation that revokes the
     * current key leaves no older one working out its overlap); never the key it was rotated into.
     * Undefined when there is no key with that id. Revoking twice is harmless (and recorded once).
     */
    revoke(id: number, { actor }: Pick<ChangeOptions, 'actor'> = {}) {
      return db.transaction(async (tx): Promise<ApiKeyRecord | undefined> => {
        const key = await keys.lockForChange(tx, id);
        if (!key || key.revokedAt) return key;
        const revoked = await keys.revokeWithOverlaps(tx, id, key.quotaId);
        if (actor) await recordAudit(tx, actor, 'key.revoke', id, sameQuotaOf(id, ascending(revoked.map((other) => other.id))));
        return revoked.find((other) => other.id === id)!;
      });
    },
  };
}

export type KeyRules = ReturnType<typeof createKeyRules>;
