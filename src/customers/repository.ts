import type { CustomerLimits } from '../api-keys/identity.js';
import { limitOf } from '../plans/windows.js';
import { storedWindows } from '../api-keys/repository.js';
import { normalizeLimits, type LimitWindow, type Limits } from '../plans/limits.js';
import type { Database, Queryable } from '../platform/db/database.js';
import { ExternalIdTakenError } from './errors.js';

/** A customer's limits as the admin API shows them: its windows, the limits of those named minute and day (null for none), its concurrency. */
export interface SharedLimits {
  perMinute: number | null;
  perDay: number | null;
  windows: Limits;
  concurrency: number | null;
}

/** The limits as shown, from the windows and concurrency stored. */
export const sharedLimitsOf = (limits: CustomerLimits | null): SharedLimits | null =>
  limits && {
    perMinute: limitOf(limits.limits, 'minute'),
    perDay: limitOf(limits.limits, 'day'),
    windows: limits.limits,
    concurrency: limits.concurrency,
  };

/** A customer's own row, as the admin API shows it (without its credits: rules.ts adds them). */
export interface CustomerFields {
  id: number;
  externalId: string;
  name: string;
  /** Limits shared by all its keys; null for none. */
  limits: SharedLimits | null;
  createdAt: string;
  updatedAt: string;
}

interface CustomerRow {
  id: number;
  external_id: string;
  name: string;
  limits: LimitWindow[] | null;
  concurrency: number | null;
  created_at: Date;
  updated_at: Date;
}

const COLUMNS = 'id, external_id, name, limits, concurrency, created_at, updated_at';

const statements = {
  insert: {
    name: 'customers_insert',
    text: `INSERT INTO customers (external_id, name, limits, concurrency) VALUES ($1, $2, $3::jsonb, $4) RETURNING ${COLUMNS}`,
  },
  get: { name: 'customers_get', text: `SELECT ${COLUMNS} FROM customers WHERE id = $1` },
  forChange: { name: 'customers_for_change', text: `SELECT ${COLUMNS} FROM customers WHERE id = $1 FOR UPDATE` },
  update: {
    name: 'customers_update',
    text: `UPDATE customers SET external_id = $2, name = $3, limits = $4::jsonb, concurrency = $5, updated_at = now()
           WHERE id = $1 RETURNING ${COLUMNS}`,
  },
  // In id order after the cursor's id; the filter is unique, so its page has one customer at most.
  page: { name: 'customers_page', text: `SELECT ${COLUMNS} FROM customers WHERE id > $1 ORDER BY id LIMIT $2` },
  pageByExternalId: {
    name: 'customers_page_external_id',
    text: `SELECT ${COLUMNS} FROM customers WHERE id > $1 AND external_id = $3 ORDER BY id LIMIT $2`,
  },
} as const;

const recordOf = (row: CustomerRow): CustomerFields => ({
  id: row.id,
  externalId: row.external_id,
  name: row.name,
  limits: sharedLimitsOf(row.limits && { limits: normalizeLimits(row.limits), concurrency: row.concurrency }),
  createdAt: new Date(row.created_at).toISOString(),
  updatedAt: new Date(row.updated_at).toISOString(),
});

/** PostgreSQL's unique_violation, as both drivers report it: here, only customers_external_id_key can raise it. */
const UNIQUE_VIOLATION = '23505';

/** Runs a write of `externalId`; another customer's externalId is an ExternalIdTakenError (409), not a 500. */
async function claiming<T>(externalId: string, write: () => Promise<T>): Promise<T> {
  try {
    return await write();
  } catch (error) {
    if ((error as { code?: unknown }).code === UNIQUE_VIOLATION) throw new ExternalIdTakenError(externalId, { cause: error });
    throw error;
  }
}

/** The limits' columns: limits (the windows), concurrency. */
const limitColumns = (limits: CustomerLimits | null) => [storedWindows(limits?.limits), limits?.concurrency ?? null];

/** A customer's own fields as a create or change writes them. */
export interface CustomerFieldsInput {
  externalId: string;
  name: string;
  /** Its windows and concurrency; null for no shared limits. */
  limits: CustomerLimits | null;
}

/**
 * The customers table: each method runs on the caller's transaction (`target`) when given, so that a
 * change, its credits and its audit entry (rules.ts) commit together.
 */
export function createCustomersRepository(db: Database) {
  return {
    /** Stores a customer; an ExternalIdTakenError when another has its externalId. */
    insert: (target: Queryable, { externalId, name, limits }: CustomerFieldsInput): Promise<CustomerFields> =>
      claiming(externalId, async () => {
        const [row] = await target.query<CustomerRow>(statements.insert, [externalId, name, ...limitColumns(limits)]);
        return recordOf(row!);
      }),

    async get(id: number, target: Queryable = db): Promise<CustomerFields | undefined> {
      const [row] = await target.query<CustomerRow>(statements.get, [id]);
      return row && recordOf(row);
    },

    /** The customer, locked against concurrent changes until the transaction ends; undefined for none. */
    async lockForChange(tx: Queryable, id: number): Promise<CustomerFields | undefined> {
      const [row] = await tx.query<CustomerRow>(statements.forChange, [id]);
      return row && recordOf(row);
    },

    /** Writes a customer's externalId, name and limits; an ExternalIdTakenError when another has the externalId. */
    update: (tx: Queryable, id: number, { externalId, name, limits }: CustomerFieldsInput): Promise<CustomerFields> =>
      claiming(externalId, async () => {
        const [row] = await tx.query<CustomerRow>(statements.update, [id, externalId, name, ...limitColumns(limits)]);
        return recordOf(row!);
      }),

    /** A page of customers in id order after `afterId`, filtered by externalId; `nextAfterId` when more follow. */
    async page({ limit, afterId, externalId }: { limit: number; afterId: number; externalId?: string }) {
      const rows =
        externalId === undefined
          ? await db.query<CustomerRow>(statements.page, [afterId, limit + 1])
          : await db.query<CustomerRow>(statements.pageByExternalId, [afterId, limit + 1, externalId]);
      const customers = rows.slice(0, limit).map(recordOf);
      return { customers, nextAfterId: rows.length > limit ? customers.at(-1)!.id : undefined };
    },
  };
}

export type CustomersRepository = ReturnType<typeof createCustomersRepository>;
