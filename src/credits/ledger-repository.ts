import type { Database } from '../platform/db/database.js';
import type { BalanceRecords, BalanceSeed, LockedSpending, RecordedBalance } from './ports.js';

/**
 * The statements of the hot path's record of credits (credit_balances, migrations/016): the
 * record a store seeds a balance from, the spending the instances add in batches (or the live
 * spending of a shared store they follow), the balances
 * the limiter's fallback decides in the record itself while Redis is unreachable, and the
 * once-per-version mark of a balance told exhausted.
 */
const statements = {
  record: { name: 'credit_balances_record', text: 'SELECT spent, version FROM credit_balances WHERE id = $1' },
  // One statement for every balance an instance spent from since its last write. Spending of a
  // version the record no longer holds is dropped: a set or refill replaced it. GREATEST: refunds
  // subtract, and one written after its spending was dropped must not break the CHECK (and so the batch).
  addSpent: {
    name: 'credit_balances_add_spent',
    text: `UPDATE credit_balances b SET spent = GREATEST(b.spent + d.n, 0)
           FROM unnest($1::bigint[], $2::int[], $3::bigint[]) AS d(id, version, n)
           WHERE b.id = d.id AND b.version = d.version`,
  },
  // The live spending a shared store (Redis) holds of each balance, in its version: the record
  // follows it, never below (a unit the fallback spent in the record while Redis was unreachable
  // stays), less what the writing instance gave back since its last write (a free 304's refund,
  // which the store's spent already nets). Writes of any instance, in any order, agree.
  followSpent: {
    name: 'credit_balances_follow_spent',
    text: `UPDATE credit_balances b SET spent = GREATEST(b.spent - d.given_back, d.s)
           FROM unnest($1::bigint[], $2::int[], $3::bigint[], $4::bigint[]) AS d(id, version, s, given_back)
           WHERE b.id = d.id AND b.version = d.version`,
  },
  // Locked in the order of their ids: two requests claiming the same two balances take turns, never deadlock.
  lock: {
    name: 'credit_balances_lock',
    text: 'SELECT id, base, spent, version FROM credit_balances WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE',
  },
  read: { name: 'credit_balances_read', text: 'SELECT id, base, spent, version FROM credit_balances WHERE id = ANY($1::bigint[])' },
  // Alike requests of the fallback (the same balances, the same cost) in one statement, one round
  // trip: the balances locked (as by `lock`, the rows' latest versions), then as many of the
  // requests served, in order, as every balance holds. NULLIF: a cost of 0 takes nothing.
  spendAtOnce: {
    name: 'credit_balances_spend_at_once',
    text: `WITH locked AS (SELECT id, base, spent, version FROM credit_balances WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE),
           served AS (SELECT LEAST($3::bigint, min((base - spent) / NULLIF($2::bigint, 0))) AS n FROM locked),
           paid AS (UPDATE credit_balances b SET spent = l.spent + s.n * $2 FROM locked l, served s WHERE b.id = l.id AND s.n > 0)
           SELECT id, base, spent, version FROM locked`,
  },
  // What the fallback decided of balances it locked, in the same transaction: no version to match.
  spendLocked: {
    name: 'credit_balances_spend_locked',
    text: `UPDATE credit_balances b SET spent = b.spent + d.n FROM unnest($1::bigint[], $2::bigint[]) AS d(id, n) WHERE b.id = d.id`,
  },
  // Matches once per balance and version across all instances: the instance it matched for tells.
  markExhausted: {
    name: 'credit_balances_mark_exhausted',
    text: `UPDATE credit_balances SET exhausted_version = version
           WHERE id = $1 AND version = $2 AND exhausted_version IS DISTINCT FROM $2 RETURNING id`,
  },
} as const;

interface BalanceRow {
  id: string | number;
  base: string | number;
  spent: string | number;
  version: number;
}

const balanceOf = ({ id, base, spent, version }: BalanceRow): RecordedBalance => ({
  id: Number(id),
  remaining: Number(base) - Number(spent),
  version,
});

export function createLedgerRepository(db: Database) {
  /** Adds units spent (negative: refunded) to each balance still in the version they were spent in. */
  const addSpent = async (ids: readonly number[], versions: readonly number[], units: readonly number[]) => {
    await db.query(statements.addSpent, [ids, versions, units]);
  };
  // What the limiter's fallback spends in while Redis is unreachable: its port, implemented here.
  const records = {
    /**
     * While Redis is unreachable (the limiter's fallback): in one transaction locking the balances,
     * spends what `decide` makes of them as they stand (units by balance), and answers its answer.
     */
    spendLocked: <T>(ids: readonly number[], decide: (balances: RecordedBalance[]) => LockedSpending<T>) =>
      db.transaction(async (tx) => {
        const { spend, answer } = decide((await tx.query<BalanceRow>(statements.lock, [ids])).map(balanceOf));
        if (spend.size > 0) await tx.query(statements.spendLocked, [[...spend.keys()], [...spend.values()]]);
        return answer;
      }),

    /**
     * As spendLocked deciding `count` requests of `cost` from every one of the balances, in one
     * statement: as many of them served, in order, as every balance holds. The balances as they stood.
     */
    spendAtOnce: async (ids: readonly number[], cost: number, count: number) =>
      (await db.query<BalanceRow>(statements.spendAtOnce, [ids, cost, count])).map(balanceOf),

    /** The balances as they stand, locking nothing: a check of the fallback's. */
    remaining: async (ids: readonly number[]) => (await db.query<BalanceRow>(statements.read, [ids])).map(balanceOf),

    /** Gives back what spendLocked spent (a free 304), to each balance still in the version it was spent in. */
    giveBack: (ids: readonly number[], versions: readonly number[], cost: number) =>
      addSpent(
        ids,
        versions,
        ids.map(() => -cost),
      ),
  } satisfies BalanceRecords;
  return {
    ...records,

    /** The balance's record; undefined when it is gone (removed since the key was read). */
    async record(id: number): Promise<BalanceSeed | undefined> {
      const [row] = await db.query<{ spent: string | number; version: number }>(statements.record, [id]);
      return row && { spent: Number(row.spent), version: row.version };
    },

    addSpent,

    /** Raises each balance still in the version given to the live spent given, less what was given back (see followSpent). */
    async followSpent(
      ids: readonly number[],
      versions: readonly number[],
      spent: readonly number[],
      givenBack: readonly number[],
    ): Promise<void> {
      await db.query(statements.followSpent, [ids, versions, spent, givenBack]);
    },

    /** Marks the balance told exhausted in this version; true for the one call, of any instance, that marked it. */
    async markExhausted(id: number, version: number): Promise<boolean> {
      return (await db.query(statements.markExhausted, [id, version])).length > 0;
    },
  };
}

export type LedgerRepository = ReturnType<typeof createLedgerRepository>;
