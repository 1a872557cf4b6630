import type { CustomerLimits } from '../api-keys/identity.js';
import { checkedWindows, sameWindows, withShortForm } from '../plans/windows.js';
import type { LimitWindow } from '../plans/limits.js';
import { recordAudit, type Actor, type ChangeOptions } from '../audit/repository.js';
import { createCreditsRepository, type CreditsChanged } from '../credits/repository.js';
import type { CreditsSetting } from '../credits/refill.js';
import type { Credits } from '../credits/schemas.js';
import { atomically, type Database, type Queryable } from '../platform/db/database.js';
import { IncompleteLimitsError } from './errors.js';
import { createCustomersRepository, sharedLimitsOf, type CustomerFields, type SharedLimits } from './repository.js';

/** A customer's limits as a body gives them: a list of windows, the object form (windows or the short form, and a concurrency), or null for none. */
export type LimitsInput =
  readonly LimitWindow[] | { windows?: readonly LimitWindow[]; perMinute?: number; perDay?: number; concurrency?: number | null } | null;

/** A customer as the admin API shows it: with its credits, which all its keys spend (null for none). */
export type CustomerRecord = CustomerFields & { credits: Credits | null };

/** A customer as a create gives it: its externalId, and by default no name, limits or credits. */
export interface CustomerToCreate {
  externalId: string;
  name?: string;
  /** Checked by customerLimitsOf. */
  limits?: CustomerLimits | null;
  credits?: CreditsSetting;
}

/** The fields of a customer a change may set; absent ones keep their value (limits null removes them, credits null its balance). */
export interface CustomerChange {
  externalId?: string;
  name?: string;
  /** Checked by customerLimitsOf; null removes them. */
  limits?: CustomerLimits | null;
  /** A set of its credits (a new version from remaining, with this refill), or null to remove them. */
  credits?: CreditsSetting | null;
}

/** A change with its audit entry: made by someone, always recorded. */
type RecordedChange = Pick<ChangeOptions, 'tx'> & { actor: Actor };

/**
 * The limits a body gives, checked and in the form stored (undefined when absent, null for none): a list of windows
 * (with no concurrency), or the object form's windows with perMinute and perDay replacing or adding the windows named minute
 * and day (both needed without windows: an IncompleteLimitsError naming the one missing). A limits error (api-keys/errors.ts)
 * names the field for a repeated name or a window below an operation's cost (RATE_LIMIT_COSTS), which would refuse it to every
 * key of the customer, for good. Touches no database, so a request is refused before its Idempotency-Key is claimed.
 */
export function customerLimitsOf(input: LimitsInput | undefined, costs: Record<string, number>): CustomerLimits | null | undefined {
  if (input === undefined || input === null) return input;
  if (Array.isArray(input)) return { limits: checkedWindows(input as readonly LimitWindow[], costs), concurrency: null };
  const { windows, perMinute, perDay, concurrency = null } = input as Exclude<LimitsInput, readonly LimitWindow[] | null>;
  if (!windows) {
    if (perMinute === undefined) throw Object.assign(new IncompleteLimitsError(), { field: 'limits/perMinute' });
    if (perDay === undefined) throw Object.assign(new IncompleteLimitsError(), { field: 'limits/perDay' });
  }
  const listed = windows ? checkedWindows(windows, costs, 'limits/windows') : [];
  return { limits: withShortForm(listed, { perMinute, perDay }, costs, 'limits/'), concurrency };
}

const sameLimits = (a: CustomerLimits | null, b: CustomerLimits | null) =>
  a === b || (a !== null && b !== null && sameWindows(a.limits, b.limits) && a.concurrency === b.concurrency);

/** The limits as stored, from the shown form. */
const storedOf = (shown: SharedLimits | null): CustomerLimits | null => shown && { limits: shown.windows, concurrency: shown.concurrency };

/** The credits before and after, in an audit entry, when a change set them. */
const creditsAudit = (changed: CreditsChanged | undefined, side: keyof CreditsChanged) => (changed ? { credits: changed[side] } : {});

/**
 * What may be done to a customer, and the audit entry of each change, in one transaction with it
 * (the caller's, for an Idempotency-Key, or one of its own): its row (repository.ts) and its
 * credits (credits/repository.ts), which every read shows with it.
 */
export function createCustomerRules(db: Database) {
  const customers = createCustomersRepository(db);
  const credits = createCreditsRepository(db);
  const withCredits = async (fields: CustomerFields, target: Queryable = db) => (await credits.ofCustomers([fields], target))[0]!;

  return {
    /** Stores a customer, with its credits if given; an ExternalIdTakenError when another has its externalId. */
    create: (
      { externalId, name = '', limits = null, credits: setting }: CustomerToCreate,
      { tx, actor }: RecordedChange,
    ): Promise<CustomerRecord> =>
      atomically(db, tx, async (target) => {
        const customer = await customers.insert(target, { externalId, name, limits });
        const { after = null } = setting ? await credits.replace(target, { customerId: customer.id }, setting) : {};
        await recordAudit(target, actor, 'customer.create', null, {
          customerId: customer.id,
          externalId,
          name,
          limits: customer.limits,
          ...(after && { credits: after }),
        });
        return { ...customer, credits: after };
      }),

    async get(id: number): Promise<CustomerRecord | undefined> {
      const customer = await customers.get(id);
      return customer && withCredits(customer);
    },

    /**
     * Changes a customer's externalId, name, limits or credits, with its audit entry (the values before and
     * after); a change to what it already is changes and records nothing (credits given are always a
     * set). A change of the limits or credits reaches every instance's key cache as a change of the
     * customer's keys (migrations/015, 016).
     * Undefined when there is no such customer; an ExternalIdTakenError when another has the externalId.
     */
    update: (id: number, change: CustomerChange, { actor }: Pick<RecordedChange, 'actor'>): Promise<CustomerRecord | undefined> =>
      db.transaction(async (tx) => {
        const before = await customers.lockForChange(tx, id);
        if (!before) return undefined;
        const after = {
          externalId: change.externalId ?? before.externalId,
          name: change.name ?? before.name,
          limits: change.limits === undefined ? storedOf(before.limits) : change.limits,
        };
        const same =
          after.externalId === before.externalId && after.name === before.name && sameLimits(after.limits, storedOf(before.limits));
        if (same && change.credits === undefined) return withCredits(before, tx);
        const updated = same ? before : await customers.update(tx, id, after);
        const changed = change.credits === undefined ? undefined : await credits.replace(tx, { customerId: id }, change.credits);
        await recordAudit(tx, actor, 'customer.update', null, {
          customerId: id,
          before: { externalId: before.externalId, name: before.name, limits: before.limits, ...creditsAudit(changed, 'before') },
          after: { ...after, limits: sharedLimitsOf(after.limits), ...creditsAudit(changed, 'after') },
        });
        return withCredits(updated, tx);
      }),

    /** A page of customers with their credits in id order after `afterId`, filtered by externalId; `nextAfterId` when more follow. */
    async page(query: { limit: number; afterId: number; externalId?: string }) {
      const { customers: page, nextAfterId } = await customers.page(query);
      return { customers: await credits.ofCustomers(page), nextAfterId };
    },
  };
}

export type CustomerRules = ReturnType<typeof createCustomerRules>;
