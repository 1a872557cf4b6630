import type { CustomerLimits } from '../api-keys/identity.js';
import { recordAudit, type Actor } from '../audit/repository.js';
import { createCreditsRepository, type CreditsChanged } from '../credits/repository.js';
import type { CreditsSetting } from '../credits/refill.js';
import type { Credits } from '../credits/schemas.js';
import { atomically, type Database, type Queryable } from '../platform/db/database.js';
import { ExternalIdTakenError } from './errors.js';

/** A customer's own row, as the admin API shows it. */
interface CustomerFields {
  id: number;
  externalId: string;
  name: string;
  /** Limits shared by all its keys; null for none. */
  limits: CustomerLimits | null;
  createdAt: string;
  updatedAt: string;
}

/** A customer as the admin API shows it: with its credits, which all its keys spend (null for none). */
export type CustomerRecord = CustomerFields & { credits: Credits | null };

interface CustomerRow {
  id: number;
  external_id: string;
  name: string;
  per_minute: number | null;
  per_day: number | null;
  concurrency: number | null;
  created_at: Date;
  updated_at: Date;
}

const COLUMNS = 'id, external_id, name, per_minute, per_day, concurrency, created_at, updated_at';

const statements = {
  insert: {
    name: 'customers_insert',
    text: `INSERT INTO customers (external_id, name, per_minute, per_day, concurrency) VALUES ($1, $2, $3, $4, $5) RETURNING ${COLUMNS}`,
  },
  get: { name: 'customers_get', text: `SELECT ${COLUMNS} FROM customers WHERE id = $1` },
  forChange: { name: 'customers_for_change', text: `SELECT ${COLUMNS} FROM customers WHERE id = $1 FOR UPDATE` },
  update: {
    name: 'customers_update',
    text: `UPDATE customers SET external_id = $2, name = $3, per_minute = $4, per_day = $5, concurrency = $6, updated_at = now()
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
  limits: row.per_minute === null ? null : { perMinute: row.per_minute, perDay: row.per_day!, concurrency: row.concurrency },
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

/** The limits as a body gives them: concurrency absent for none. */
type LimitsInput = { perMinute: number; perDay: number; concurrency?: number | null } | null;

/** The limits' columns: per_minute, per_day, concurrency. */
const limitColumns = (limits: LimitsInput) => [limits?.perMinute ?? null, limits?.perDay ?? null, limits?.concurrency ?? null];

/** The limits as stored and shown: concurrency null for none. */
const limitsOf = (limits: LimitsInput): CustomerLimits | null => limits && { ...limits, concurrency: limits.concurrency ?? null };

const sameLimits = (a: CustomerLimits | null, b: CustomerLimits | null) =>
  a === b || (a !== null && b !== null && a.perMinute === b.perMinute && a.perDay === b.perDay && a.concurrency === b.concurrency);

/** The fields of a customer a change may set; absent ones keep their value (limits null removes them, credits null its balance). */
export interface CustomerChange {
  externalId?: string;
  name?: string;
  limits?: LimitsInput;
  /** A set of its credits (a new version from remaining, with this refill), or null to remove them. */
  credits?: CreditsSetting | null;
}

/** The credits before and after, in an audit entry, when a change set them. */
const creditsAudit = (changed: CreditsChanged | undefined, side: keyof CreditsChanged) => (changed ? { credits: changed[side] } : {});

/**
 * The customers table, and the audit entry of each change, written in the change's transaction
 * (the caller's, for an Idempotency-Key, or one of its own).
 */
export function createCustomersRepository(db: Database) {
  const credits = createCreditsRepository(db);
  const withCredits = async (fields: CustomerFields, target: Queryable = db) => (await credits.ofCustomers([fields], target))[0]!;

  return {
    /** Stores a customer, with its credits if given; an ExternalIdTakenError when another has its externalId. */
    create: (
      {
        externalId,
        name = '',
        limits = null,
        credits: setting,
      }: { externalId: string; name?: string; limits?: LimitsInput; credits?: CreditsSetting },
      actor: Actor,
      tx?: Queryable,
    ): Promise<CustomerRecord> =>
      atomically(db, tx, (target) =>
        claiming(externalId, async () => {
          const [row] = await target.query<CustomerRow>(statements.insert, [externalId, name, ...limitColumns(limits)]);
          const customer = recordOf(row!);
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
      ),

    async get(id: number): Promise<CustomerRecord | undefined> {
      const [row] = await db.query<CustomerRow>(statements.get, [id]);
      return row && withCredits(recordOf(row));
    },

    /**
     * Changes a customer's externalId, name, limits or credits, with its audit entry (the values before and
     * after); a change to what it already is changes and records nothing (credits given are always a
     * set). A change of the limits or credits reaches every instance's key cache as a change of the
     * customer's keys (migrations/015, 016).
     * Undefined when there is no such customer; an ExternalIdTakenError when another has the externalId.
     */
    update: (id: number, change: CustomerChange, actor: Actor): Promise<CustomerRecord | undefined> =>
      db.transaction(async (tx) => {
        const [row] = await tx.query<CustomerRow>(statements.forChange, [id]);
        if (!row) return undefined;
        const before = recordOf(row);
        const after = {
          externalId: change.externalId ?? before.externalId,
          name: change.name ?? before.name,
          limits: change.limits === undefined ? before.limits : limitsOf(change.limits),
        };
        const same = after.externalId === before.externalId && after.name === before.name && sameLimits(after.limits, before.limits);
        if (same && change.credits === undefined) return withCredits(before, tx);
        return claiming(after.externalId, async () => {
          const [updated] = same
            ? [row]
            : await tx.query<CustomerRow>(statements.update, [id, after.externalId, after.name, ...limitColumns(after.limits)]);
          const changed = change.credits === undefined ? undefined : await credits.replace(tx, { customerId: id }, change.credits);
          await recordAudit(tx, actor, 'customer.update', null, {
            customerId: id,
            before: { externalId: before.externalId, name: before.name, limits: before.limits, ...creditsAudit(changed, 'before') },
            after: { ...after, ...creditsAudit(changed, 'after') },
          });
          return withCredits(recordOf(updated!), tx);
        });
      }),

    /** A page of customers in id order after `afterId`, filtered by externalId; `nextAfterId` when more follow. */
    async page({ limit, afterId, externalId }: { limit: number; afterId: number; externalId?: string }) {
      const rows =
        externalId === undefined
          ? await db.query<CustomerRow>(statements.page, [afterId, limit + 1])
          : await db.query<CustomerRow>(statements.pageByExternalId, [afterId, limit + 1, externalId]);
      const customers = await credits.ofCustomers(rows.slice(0, limit).map(recordOf));
      return { customers, nextAfterId: rows.length > limit ? customers.at(-1)!.id : undefined };
    },
  };
}

export type CustomersRepository = ReturnType<typeof createCustomersRepository>;
