import type { Queryable } from '../../src/platform/db/database.js';

/** Whose balance: a customer's, or a key's quota's (the key's quotaId). */
export type BalanceOwner = { customerId: number } | { quotaId: number };

/**
 * A balance of credits made as the admin API would (this helper stands in for it): a row of
 * credit_balances, whose trigger tells every instance of the keys it binds. `refillAt` (ms) gives
 * it a daily refill of `base` due then; `spent` and `version` as the record would hold them.
 */
export async function insertBalance(
  db: Queryable,
  owner: BalanceOwner,
  base: number,
  { spent = 0, version = 1, refillAt = null }: { spent?: number; version?: number; refillAt?: number | null } = {},
): Promise<number> {
  const [row] = await db.query<{ id: number }>(
    `INSERT INTO credit_balances (customer_id, quota_id, base, spent, version, refill_interval, refill_amount, next_refill_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id`,
    [
      'customerId' in owner ? owner.customerId : null,
      'quotaId' in owner ? owner.quotaId : null,
      base,
      spent,
      version,
      refillAt === null ? null : 'day',
      refillAt === null ? null : base,
      refillAt === null ? null : new Date(refillAt),
    ],
  );
  return Number(row!.id);
}

/** A balance's record as PostgreSQL holds it. */
export async function balanceRecord(db: Queryable, id: number) {
  const [row] = await db.query<{ base: number; spent: number; version: number; exhausted_version: number | null }>(
    'SELECT base, spent, version, exhausted_version FROM credit_balances WHERE id = $1',
    [id],
  );
  return { base: Number(row!.base), spent: Number(row!.spent), version: row!.version, exhaustedVersion: row!.exhausted_version };
}
