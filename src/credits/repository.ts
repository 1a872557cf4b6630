import type { Database, Queryable, Transaction } from '../platform/db/database.js';
import { nextRefillAt, type CreditsSetting, type Refill, type RefillInterval } from './refill.js';
import type { CreditOperation, Credits } from './schemas.js';

/** Whose balance: a customer's, or a key quota's (the quotaId its rotations share). */
export type CreditsOwner = { customerId: number } | { quotaId: number };

/** The most a balance's base may reach by increments: far below 2^53, so it stays exact as a JSON number. */
export const MAX_BALANCE = 1_000_000_000_000_000;

interface BalanceRow {
  id: number;
  customer_id: number | null;
  quota_id: number | null;
  base: number;
  spent: number;
  version: number;
  refill_interval: RefillInterval | null;
  refill_amount: number | null;
  refill_day: number | null;
  next_refill_at: Date | null;
}

const COLUMNS = 'id, customer_id, quota_id, base, spent, version, refill_interval, refill_amount, refill_day, next_refill_at';

/** A new version of the row named `row`: spending recorded for the one before is dropped, and its exhaustion may be told again. */
const newVersion = (row = 'credit_balances') => `spent = 0, version = ${row}.version + 1, exhausted_version = NULL, updated_at = now()`;

/** The statements on the balances of one kind of owner (customer_id or quota_id), each prepared under its own name. */
function statementsOf(owner: 'customer_id' | 'quota_id') {
  const named = (what: string, text: string) => ({ name: `credit_balances_${what}_${owner}`, text });
  return {
    get: named('get', `SELECT ${COLUMNS} FROM credit_balances WHERE ${owner} = $1`),
    getMany: named('get_many', `SELECT ${COLUMNS} FROM credit_balances WHERE ${owner} = ANY($1::bigint[])`),
    // A set with its refill: a new version from remaining, whether or not there was a balance.
    replace: named(
      'replace',
      `INSERT INTO credit_balances (${owner}, base, refill_interval, refill_amount, refill_day, next_refill_at)
       VALUES ($1, $2, $3, $4, $5, $6)
       ON CONFLICT (${owner}) DO UPDATE SET base = EXCLUDED.base, refill_interval = EXCLUDED.refill_interval,
         refill_amount = EXCLUDED.refill_amount, refill_day = EXCLUDED.refill_day, next_refill_at = EXCLUDED.next_refill_at, ${newVersion()}
       RETURNING ${COLUMNS}`,
    ),
    remove: named('remove', `DELETE FROM credit_balances WHERE ${owner} = $1 RETURNING ${COLUMNS}`),
    // The operations, each one statement, so that concurrent ones add up exactly; set and increment make a balance without a refill.
    set: named(
      'set',
      `INSERT INTO credit_balances (${owner}, base) VALUES ($1, $2)
       ON CONFLICT (${owner}) DO UPDATE SET base = EXCLUDED.base, ${newVersion()} RETURNING ${COLUMNS}`,
    ),
    increment: named(
      'increment',
      `INSERT INTO credit_balances (${owner}, base) VALUES ($1, $2)
       ON CONFLICT (${owner}) DO UPDATE SET base = credit_balances.base + EXCLUDED.base, updated_at = now()
       WHERE credit_balances.base + EXCLUDED.base <= ${MAX_BALANCE} RETURNING ${COLUMNS}`,
    ),
    // A new version from what really remained ($3: spent as the store knows it, ahead of the record) less
    // the amount, floored at 0: no debt left behind for the next increment to pay. $4: the version that spending is of.
    decrement: named(
      'decrement',
      `UPDATE credit_balances SET base = GREATEST(base - GREATEST(spent, $3) - $2, 0), ${newVersion()}
       WHERE ${owner} = $1 AND version = $4 RETURNING ${COLUMNS}`,
    ),
  };
}

const STATEMENTS = { customer_id: statementsOf('customer_id'), quota_id: statementsOf('quota_id') };

const statementsFor = (owner: CreditsOwner) => ('customerId' in owner ? STATEMENTS.customer_id : STATEMENTS.quota_id);
const idOf = (owner: CreditsOwner) => ('customerId' in owner ? owner.customerId : owner.quotaId);

const refillOf = (row: BalanceRow): Refill | null => {
  if (row.refill_interval === null) return null;
  return row.refill_interval === 'month'
    ? { interval: 'month', amount: row.refill_amount!, dayOfMonth: row.refill_day! }
    : { interval: 'day', amount: row.refill_amount! };
};

/** A balance as the admin API shows it: remaining as recorded, never below 0. */
const creditsOf = (row: BalanceRow): Credits => ({
  remaining: Math.max(0, row.base - row.spent),
  refill: refillOf(row),
  refillAt: row.next_refill_at && new Date(row.next_refill_at).toISOString(),
});

/** A balance as the store is claimed it: its id, base and version, with what the record holds spent. */
export interface BalanceState {
  id: number;
  base: number;
  spent: number;
  version: number;
}

/** A change of a balance, as its audit entry records it: the credits before and after (null for none). */
export interface CreditsChanged {
  before: Credits | null;
  after: Credits | null;
}

/**
 * The credit balances' record (migrations/016) as the admin API changes it: sets, removals and the
 * three operations, each one statement. `spent` is the limiter's to add to; the refills are the
 * refill job's (plugin.ts). Methods run on the caller's transaction (`target`), so that a change
 * and its audit entry commit together; the caller locks the owner first (lockCustomer, lockQuota)
 * so that `before` is exact.
 */
export function createCreditsRepository(db: Database) {
  const read = async (target: Queryable, owner: CreditsOwner) => {
    const [row] = await target.query<BalanceRow>(statementsFor(owner).get, [idOf(owner)]);
    return row ? creditsOf(row) : null;
  };

  /** The credits of many owners of one kind, by owner id. */
  const byOwner = async (column: 'customer_id' | 'quota_id', ids: number[], target: Queryable) => {
    const unique = [...new Set(ids)];
    if (unique.length === 0) return new Map<number, Credits>();
    const rows = await target.query<BalanceRow>(STATEMENTS[column].getMany, [unique]);
    return new Map(rows.map((row) => [row[column]!, creditsOf(row)]));
  };

  return {
    /** The keys given, each with its quota's credits (null for none): one read for them all. */
    async ofKeys<T extends { quotaId: number }>(keys: T[], target: Queryable = db): Promise<Array<T & { credits: Credits | null }>> {
      const found = await byOwner(
        'quota_id',
        keys.map((key) => key.quotaId),
        target,
      );
      return keys.map((key) => ({ ...key, credits: found.get(key.quotaId) ?? null }));
    },

    /** The customers given, each with its credits (null for none). */
    async ofCustomers<T extends { id: number }>(customers: T[], target: Queryable = db): Promise<Array<T & { credits: Credits | null }>> {
      const found = await byOwner(
        'customer_id',
        customers.map((customer) => customer.id),
        target,
      );
      return customers.map((customer) => ({ ...customer, credits: found.get(customer.id) ?? null }));
    },

    /** Sets the balance and its refill (a new version), or removes it (null). */
    async replace(target: Queryable, owner: CreditsOwner, setting: CreditsSetting | null): Promise<CreditsChanged> {
      const before = await read(target, owner);
      const statements = statementsFor(owner);
      if (setting === null) {
        await target.query(statements.remove, [idOf(owner)]);
        return { before, after: null };
      }
      const { remaining, refill, nextRefillAt } = setting;
      const dayOfMonth = refill && 'dayOfMonth' in refill ? refill.dayOfMonth : null;
      const [row] = await target.query<BalanceRow>(statements.replace, [
        idOf(owner),
        remaining,
        refill?.interval ?? null,
        refill?.amount ?? null,
        dayOfMonth,
        nextRefillAt,
      ]);
      return { before, after: creditsOf(row!) };
    },

    /**
     * Applies a set or increment in one statement; `after` is null when an increment would take the
     * balance past MAX_BALANCE.
     */
    async apply(target: Queryable, owner: CreditsOwner, operation: Exclude<CreditOperation, 'decrement'>, amount: number) {
      const before = await read(target, owner);
      const [row] = await target.query<BalanceRow>(statementsFor(owner)[operation], [idOf(owner), amount]);
      return { before, after: row ? creditsOf(row) : null };
    },

    /** The owner's balance as it stands in the record; undefined for none. */
    async state(target: Queryable, owner: CreditsOwner): Promise<BalanceState | undefined> {
      const [row] = await target.query<BalanceRow>(statementsFor(owner).get, [idOf(owner)]);
      return row && { id: row.id, base: row.base, spent: row.spent, version: row.version };
    },

    /**
     * Decrements a balance still in `live.version`, whose spending in it was `live.spent` (the store's,
     * ahead of the record): a new version from what remained less `amount`, floored at 0. `after` is
     * null when the balance has another version by now (a refill made one meanwhile).
     */
    async decrement(target: Queryable, owner: CreditsOwner, amount: number, live: { version: number; spent: number }) {
      const before = await read(target, owner);
      const [row] = await target.query<BalanceRow>(statementsFor(owner).decrement, [idOf(owner), amount, live.spent, live.version]);
      return { before, after: row ? creditsOf(row) : null };
    },

    /**
     * Refills up to `limit` balances due at `now` (the app's clock), each by one instance only (the
     * rows another is refilling are skipped), and moves each one's next refill to the next due after
     * now: a refill missed for days is made once. `refilled` runs in the same transaction, so what it
     * records (the events) commits with the refills.
     */
    refillDue: (now: number, limit: number, refilled: (tx: Transaction, balances: RefilledBalance[]) => Promise<void>) =>
      db.transaction(async (tx) => {
        const due = await tx.query<Pick<BalanceRow, 'id' | 'refill_interval' | 'refill_day'>>(refillStatements.due, [new Date(now), limit]);
        if (due.length === 0) return 0;
        const next = due.map(
          (row) => new Date(nextRefillAt({ interval: row.refill_interval!, dayOfMonth: row.refill_day ?? undefined }, now)),
        );
        const rows = await tx.query<BalanceRow>(refillStatements.refill, [due.map((row) => row.id), next.map((at) => at.toISOString())]);
        await refilled(tx, rows.map(refilledOf));
        return rows.length;
      }),

    /** Locks a customer against concurrent changes of its credits; false when there is none. */
    async lockCustomer(target: Queryable, customerId: number): Promise<boolean> {
      return (await target.query(lockStatements.customer, [customerId])).length > 0;
    },

    /**
     * Locks a key's quota (its first key) against concurrent changes of its credits; the quotaId and
     * the key's customer (whose subject keeps the balance in the store), undefined when there is no such key.
     */
    async lockQuota(target: Queryable, keyId: number): Promise<{ quotaId: number; customerId: number | null } | undefined> {
      const [row] = await target.query<{ quota_id: number; customer_id: number | null }>(lockStatements.quota, [keyId]);
      return row && { quotaId: row.quota_id, customerId: row.customer_id };
    },
  };
}

/** A balance just refilled: its new version, what remains, and when the next refill is due. */
export interface RefilledBalance {
  id: number;
  owner: CreditsOwner;
  version: number;
  remaining: number;
  refillAt: number;
}

const refilledOf = (row: BalanceRow): RefilledBalance => ({
  id: row.id,
  owner: row.customer_id === null ? { quotaId: row.quota_id! } : { customerId: row.customer_id },
  version: row.version,
  remaining: row.base,
  refillAt: new Date(row.next_refill_at!).getTime(),
});

const refillStatements = {
  // Oldest due first; the rows another instance is refilling are skipped, not waited for.
  due: {
    name: 'credit_balances_due',
    text: `SELECT id, refill_interval, refill_day FROM credit_balances WHERE next_refill_at <= $1
           ORDER BY next_refill_at LIMIT $2 FOR UPDATE SKIP LOCKED`,
  },
  refill: {
    name: 'credit_balances_refill',
    text: `UPDATE credit_balances AS balance
           SET base = balance.refill_amount, ${newVersion('balance')}, next_refill_at = due.next
           FROM unnest($1::bigint[], $2::timestamptz[]) AS due (id, next)
           WHERE balance.id = due.id RETURNING ${COLUMNS.replace(/\w+/g, 'balance.$&')}`,
  },
};

// NO KEY UPDATE: keys may still be made for the customer, or rotated in the quota, meanwhile.
const lockStatements = {
  customer: { name: 'credit_balances_lock_customer', text: 'SELECT id FROM customers WHERE id = $1 FOR NO KEY UPDATE' },
  quota: {
    name: 'credit_balances_lock_quota',
    text: `SELECT quota.id AS quota_id, quota.customer_id FROM api_keys key JOIN api_keys quota ON quota.id = coalesce(key.quota_id, key.id)
           WHERE key.id = $1 FOR NO KEY UPDATE OF quota`,
  },
};

export type CreditsRepository = ReturnType<typeof createCreditsRepository>;
