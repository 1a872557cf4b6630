import { recordAudit, type ChangeOptions } from '../audit/repository.js';
import { createCreditsRepository, type CreditsChanged } from '../credits/repository.js';
import type { CreditsSetting } from '../credits/refill.js';
import { atomically, type Database, type Queryable } from '../platform/db/database.js';
import { RevokedKeyError, RotatedKeyError } from './errors.js';
import { parseExpiry } from './expiry.js';
import { DEFAULT_OVERLAP_SECONDS } from './lifecycle.js';
import { checkCostsFit, ownLimits, PLAN_LIMITS, type Plan } from './plans.js';
import type { ApiKeyRecord, ApiKeysRepository, IssuedApiKey, NewApiKey } from './repository.js';

/** A key as the admin API's createKey and the keys command's create take it, before the rules checked it. */
export interface KeyRequest {
  plan: Plan;
  name?: string;
  perMinute?: number;
  perDay?: number;
  expiresAt?: string;
  readOnly?: boolean;
  enforceLimits?: boolean;
  concurrency?: number | null;
  customerId?: number;
}

/** A change of a key's plan, limits, name or enforcement; absent fields keep their value (a null concurrency is its plan's). */
export interface ApiKeyChange {
  plan?: Plan;
  perMinute?: number;
  perDay?: number;
  name?: string;
  enforceLimits?: boolean;
  concurrency?: number | null;
  /** A set of the quota's credits (a new version from remaining, with this refill), or null to remove them. */
  credits?: CreditsSetting | null;
}

/** The credits before and after, in an audit entry, when a change set them. */
const creditsAudit = (changed: CreditsChanged | undefined, side: keyof CreditsChanged) => (changed ? { credits: changed[side] } : {});

/** An expiry as given, checked (parseExpiry): undefined for none; an expiry error (errors.ts) otherwise. */
export const expiryOf = (expiresAt: string | undefined, now: number): Date | undefined =>
  expiresAt === undefined ? undefined : parseExpiry(expiresAt, now);

/**
 * The key a request or a command line asks for, checked: limits that go with its plan (a
 * limits error, errors.ts), then an expiry in the future (an expiry error). Touches no database, so the keys
 * command refuses bad arguments before it opens one.
 */
export function newKey({ plan, name, perMinute, perDay, expiresAt, ...settings }: KeyRequest, now: number): NewApiKey {
  const limits = ownLimits(plan, perMinute, perDay);
  return { plan, name, limits, expiresAt: expiryOf(expiresAt, now), ...settings };
}

/** The ids of the other keys of the quota a change took along, when there are any (the audit entry's `sameQuota`). */
const sameQuotaOf = (id: number, ids: number[]) => {
  const others = ids.filter((other) => other !== id);
  return others.length > 0 ? { sameQuota: others } : {};
};

const ascending = (ids: number[]) => ids.sort((a, b) => a - b);

/** What an update may change, in the order its audit entry records them before and after. */
const SETTINGS = ['plan', 'perMinute', 'perDay', 'name', 'enforceLimits', 'concurrency'] as const;
type KeySettings = Pick<ApiKeyRecord, (typeof SETTINGS)[number]>;

const settingsOf = ({ plan, perMinute, perDay, name, enforceLimits, concurrency }: KeySettings): KeySettings => ({
  plan,
  perMinute,
  perDay,
  name,
  enforceLimits,
  concurrency,
});

/**
 * A key's settings once changed (absent fields keep their value), and its own limits (enterprise
 * only); a limits error (errors.ts) when the limits do not go with the plan, or new ones fall short of a cost.
 */
function settingsAfter(before: ApiKeyRecord, change: ApiKeyChange, costs: Record<string, number>) {
  const plan = change.plan ?? before.plan;
  // An enterprise key keeps the limits it has unless given new ones; another plan's come from its table.
  const kept = plan === 'enterprise' && before.plan === 'enterprise' ? before : undefined;
  const limits = ownLimits(plan, change.perMinute ?? kept?.perMinute, change.perDay ?? kept?.perDay);
  // New limits must fit; a key's limits stored before a cost rose do not stop a change of its name.
  if (limits && (limits.perMinute !== before.perMinute || limits.perDay !== before.perDay)) checkCostsFit(limits, costs);
  const name = change.name ?? before.name;
  const enforceLimits = change.enforceLimits ?? before.enforceLimits;
  const concurrency = change.concurrency === undefined ? before.concurrency : change.concurrency;
  const after: KeySettings = { plan, ...(limits ?? PLAN_LIMITS[plan as Exclude<Plan, 'enterprise'>]), name, enforceLimits, concurrency };
  return { after, limits };
}

/**
 * What may be done to a key, and the audit entry of each change, in one transaction with it: the
 * one place the admin API and the keys command change keys through, so the two cannot drift.
 * The repository holds the statements; changes reach every instance through the api_keys notices.
 * `costs` are RATE_LIMIT_COSTS: a key's own limits must fit every operation's cost.
 */
export function createKeyRules(db: Database, keys: ApiKeysRepository, costs: Record<string, number>) {
  const credits = createCreditsRepository(db);

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
     * Creates a key newKey checked, with the credits given (its quota's), and returns it with its secret; a LimitBelowCostError when
     * an operation costs more than its limits, an UnknownCustomerError when its customerId names no customer.
     */
    create: (key: NewApiKey, { tx, actor, credits: setting }: ChangeOptions & { credits?: CreditsSetting } = {}): Promise<IssuedApiKey> =>
      atomically(db, tx, async (target) => {
        if (key.limits) checkCostsFit(key.limits, costs);
        const issued = await keys.create(key, { tx: target });
        const changed = setting && (await credits.replace(target, { quotaId: issued.record.quotaId }, setting));
        if (actor) {
          const { plan, name, perMinute, perDay, expiresAt, readOnly, enforceLimits, concurrency, customerId } = issued.record;
          await recordAudit(target, actor, 'key.create', issued.id, {
            plan,
            name,
            perMinute,
            perDay,
            expiresAt,
            readOnly,
            enforceLimits,
            concurrency,
            // Only a key of a customer says so: a key of its own is recorded as before customers were; so for credits.
            ...(customerId !== null && { customerId }),
            ...creditsAudit(changed, 'after'),
          });
        }
        return issued;
      }),

    /**
     * Replaces a key with a new one of the same plan, limits, name, scope, enforcement, quota and customer; the old one
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
        const { perMinute, perDay } = old;
        const { plan, name, readOnly, enforceLimits, concurrency, customerId } = old;
        const successor = { plan, name, readOnly, enforceLimits, concurrency, customerId, expiresAt };
        const limits = old.plan === 'enterprise' ? { perMinute, perDay } : undefined;
        const created = await keys.create({ ...successor, limits }, { tx, quotaId: old.quotaId });
        const retired = await keys.retire(tx, id, created.id, overlapSeconds, old.quotaId);
        if (actor) {
          await recordAudit(tx, actor, 'key.rotate', id, { newKeyId: created.id, overlapSeconds, ...sameQuotaOf(id, ascending(retired)) });
        }
        return created;
      });
    },

    /**
     * Changes a key's plan, limits, name, enforcement (shadow mode, concurrency) or credits (its quota's: a set, or null to remove them),
     * effective wherever the key is cached as soon as the change notice arrives. The plan and limits are the quota's: the keys rotated into this one
     * and still in their overlap take them too, so a cut binds every key counting in the quota.
     * Undefined when there is no such key; a limits error when the limits do not go with the plan,
     * or an operation costs more than them; a RevokedKeyError or RotatedKeyError for a revoked or rotated key.
     */
    update(id: number, change: ApiKeyChange, { actor }: Pick<ChangeOptions, 'actor'> = {}) {
      return db.transaction(async (tx): Promise<ApiKeyRecord | undefined> => {
        const before = await changeable(tx, id, 'change its successor, or create a new key');
        if (!before) return undefined;
        const { after, limits } = settingsAfter(before, change, costs);
        const same = SETTINGS.every((field) => after[field] === before[field]);
        if (same && change.credits === undefined) return before;
        const { plan, name, enforceLimits, concurrency } = after;
        const updated = same
          ? [before]
          : await keys.updateQuota(tx, id, { plan, limits, name, quotaId: before.quotaId, enforceLimits, concurrency });
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
