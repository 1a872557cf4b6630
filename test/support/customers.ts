import type { Queryable } from '../../src/platform/db/database.js';

/** A customer (a row of its own, no keys), as the admin API makes one; its id. */
export async function insertCustomer(db: Queryable, externalId: string): Promise<number> {
  const [row] = await db.query<{ id: number }>('INSERT INTO customers (external_id) VALUES ($1) RETURNING id', [externalId]);
  return Number(row!.id);
}
