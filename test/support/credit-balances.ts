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

let customers = 0;

/** A balance of a new customer (a row of its own, no keys), as insertBalance makes it: for tests of the record alone. */
export async function insertCustomerBalance(db: Queryable, base: number, options?: Parameters<typeof insertBalance>[3]) {
  const [customer] = await db.query<{ id: number }>('INSERT INTO customers (external_id) VALUES ($1) RETURNING id', [
    `cus_balance_${++customers}_${Date.now()}`,
  ]);
  return insertBalance(db, { customerId: Number(customer!.id) }, base, options);
}

/**
 * Makes the ledger's writes of the balance's spending fail for real (a trigger raising on an update
 * of `spent` within its version; a set or refill passes), each attempt counted by a sequence, which
 * a failed transaction does not roll back. Returns the count of failed attempts and the way to let writes through.
 */
export async function failSpentWrites(db: Queryable, id: number) {
  const name = `refuse_spent_${id}`;
  await db.query(`CREATE SEQUENCE ${name}_attempts`);
  await db.query(
    `CREATE FUNCTION ${name}() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN PERFORM nextval('${name}_attempts'); RAISE EXCEPTION 'the ledger write refused by the test'; END $$`,
  );
  await db.query(
    `CREATE TRIGGER ${name} BEFORE UPDATE OF spent ON credit_balances FOR EACH ROW
     WHEN (NEW.id = ${id} AND NEW.version = OLD.version) EXECUTE FUNCTION ${name}()`,
  );
  return {
    failed: async () => {
      const [row] = await db.query<{ failed: boolean }>(`SELECT is_called AS failed FROM ${name}_attempts`);
      return row!.failed;
    },
    heal: () => db.query(`DROP TRIGGER ${name} ON credit_balances`),
  };
}
