import { recordAudit, type Actor, type ChangeOptions } from '../audit/repository.js';
import { atomically, type Database, type Queryable } from '../platform/db/database.js';
import { AmountTooSmallError, BalanceLimitError, NoCreditsError } from './errors.js';
import { createCreditsRepository, MAX_BALANCE, type BalanceState, type CreditsOwner, type CreditsRepository } from './repository.js';
import { MAX_AMOUNT, type Credits, type CreditsOperation } from './schemas.js';

/** Whose subject keeps a balance in the limiter's store: its customer's, or its key quota's (with the key's customer). */
export type CreditsHolder = { customerId: number } | { quotaId: number; customerId: number | null };

/** What the limiter's store has really spent of a balance in its version (the record lags it); undefined when it cannot tell. */
export type CreditsSpent = (holder: CreditsHolder, balance: Omit<BalanceState, 'spent'>) => Promise<number | undefined>;

/** Whose balance an operation changes, as its owner was found and locked, and how its refusals and audit entry name it. */
interface CreditsScope {
  owner: CreditsOwner;
  holder: CreditsHolder;
  label: string;
  keyId: number | null;
}

/** A change with its audit entry: made by someone, always recorded. */
type RecordedChange = Pick<ChangeOptions, 'tx'> & { actor: Actor };

/**
 * The operations on credits (set, increment, decrement) of a customer's balance or a key's (its
 * quota's), each with its audit entry in one transaction with it: the caller's (Idempotency-Key), or
 * one of its own. The owner is locked first, so that the entry's `before` is exact.
 */
export function createCreditsRules(db: Database, creditsSpent: CreditsSpent) {
  const credits: CreditsRepository = createCreditsRepository(db);

  /**
   * A decrement of what really remains: the store's spending, which the record lags by up to a second
   * (a floor at the recorded spending alone left a debt the next increment paid). `after` null: no balance.
   */
  async function decrementLive(tx: Queryable, { owner, holder }: CreditsScope, amount: number) {
    for (;;) {
      const balance = await credits.state(tx, owner);
      if (!balance) return { before: null, after: null };
      const spent = Math.max(balance.spent, (await creditsSpent(holder, balance)) ?? 0);
      const changed = await credits.decrement(tx, owner, amount, { version: balance.version, spent });
      // None changed: a refill made a new version meanwhile; decrement that one.
      if (changed.after) return changed;
    }
  }

  /** An operation's change of a balance, with its audit entry, in the transaction given; the credits after. */
  async function operate(tx: Queryable, scope: CreditsScope, actor: Actor, { operation, amount }: CreditsOperation): Promise<Credits> {
    if (operation !== 'set' && amount < 1) throw new AmountTooSmallError(MAX_AMOUNT, operation);
    const { owner, label, keyId } = scope;
    const { before, after } =
      operation === 'decrement' ? await decrementLive(tx, scope, amount) : await credits.apply(tx, owner, operation, amount);
    if (!after) throw before ? new BalanceLimitError(label, MAX_BALANCE) : new NoCreditsError(label);
    const action = 'customerId' in owner ? 'customer.credits' : 'key.credits';
    await recordAudit(tx, actor, action, keyId, { ...owner, operation, amount, before, after });
    return after;
  }

  return {
    /**
     * Sets, increments or decrements a customer's credits, which all its keys spend. Undefined when there is no such
     * customer; an AmountTooSmallError, NoCreditsError or BalanceLimitError (errors.ts) when the operation cannot be made.
     */
    changeCustomer: (id: number, operation: CreditsOperation, { tx, actor }: RecordedChange): Promise<Credits | undefined> =>
      atomically(db, tx, async (target) => {
        if (!(await credits.lockCustomer(target, id))) return undefined;
        const scope = { owner: { customerId: id }, holder: { customerId: id }, label: `customer ${id}`, keyId: null };
        return operate(target, scope, actor, operation);
      }),

    /** Sets, increments or decrements a key's credits: its quota's, which its rotations keep. As changeCustomer otherwise. */
    changeKey: (id: number, operation: CreditsOperation, { tx, actor }: RecordedChange): Promise<Credits | undefined> =>
      atomically(db, tx, async (target) => {
        const quota = await credits.lockQuota(target, id);
        if (!quota) return undefined;
        return operate(target, { owner: { quotaId: quota.quotaId }, holder: quota, label: `API key ${id}`, keyId: id }, actor, operation);
      }),
  };
}

export type CreditsRules = ReturnType<typeof createCreditsRules>;
