import type { Database, Queryable } from '../platform/db/database.js';
import { PlanNameTakenError } from './errors.js';
import { normalizeLimits, type Limits, type LimitWindow } from './limits.js';

/** A plan's row, as the admin API shows it: its windows shortest first, each algorithm filled in. */
export interface PlanRecord {
  name: string;
  /** Its windows; null for a plan whose keys each carry their own (enterprise). */
  limits: Limits | null;
  /** Requests a key of it may have in flight at once; null for no such limit. */
  concurrency: number | null;
  /** True: past its limits a key of the plan is served with a refusal's headers. */
  shadow: boolean;
  createdAt: string;
  updatedAt: string;
}

/** A plan's settings as a create or change writes them. */
export interface PlanSettings {
  limits: Limits | null;
  concurrency: number | null;
  shadow: boolean;
}

interface PlanRow {
  name: string;
  limits: LimitWindow[] | null;
  concurrency: number | null;
  shadow: boolean;
  created_at: Date;
  updated_at: Date;
}

const COLUMNS = 'name, limits, concurrency, shadow, created_at, updated_at';

/** A key that works: not revoked, not past its expiry (a rotated key works on until its overlap ends), as api-keys/statements.ts says. */
const WORKING = 'revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())';

const statements = {
  // By name in byte order, the same on every engine and collation.
  all: { name: 'plans_all', text: `SELECT ${COLUMNS} FROM plans ORDER BY name COLLATE "C"` },
  get: { name: 'plans_get', text: `SELECT ${COLUMNS} FROM plans WHERE name = $1` },
  forChange: { name: 'plans_for_change', text: `SELECT ${COLUMNS} FROM plans WHERE name = $1 FOR UPDATE` },
  forShare: { name: 'plans_for_share', text: `SELECT ${COLUMNS} FROM plans WHERE name = $1 FOR SHARE` },
  insert: {
    name: 'plans_insert',
    text: `INSERT INTO plans (name, limits, concurrency, shadow) VALUES ($1, $2::jsonb, $3, $4) RETURNING ${COLUMNS}`,
  },
  update: {
    name: 'plans_update',
    text: `UPDATE plans SET limits = $2::jsonb, concurrency = $3, shadow = $4, updated_at = now() WHERE name = $1 RETURNING ${COLUMNS}`,
  },
  delete: { name: 'plans_delete', text: 'DELETE FROM plans WHERE name = $1' },
  // Every working key of the plan. For the check of limits removed (rules.ts), only the keys without limits of their own
  // should count, once api_keys carries them (issue 56): that check's statement then adds `AND limits IS NULL`.
  workingKeys: { name: 'plans_working_keys', text: `SELECT count(*)::int AS count FROM api_keys WHERE plan = $1 AND ${WORKING}` },
  /** Those of them that follow the plan's windows, having none of their own. */
  workingKeysOnItsWindows: {
    name: 'plans_working_keys_on_its_windows',
    text: `SELECT count(*)::int AS count FROM api_keys WHERE plan = $1 AND limits IS NULL AND ${WORKING}`,
  },
} as const;

const recordOf = (row: PlanRow): PlanRecord => ({
  name: row.name,
  limits: row.limits && normalizeLimits(row.limits),
  concurrency: row.concurrency,
  shadow: row.shadow,
  createdAt: new Date(row.created_at).toISOString(),
  updatedAt: new Date(row.updated_at).toISOString(),
});

/** PostgreSQL's unique_violation, as both drivers report it: here, only the plans' primary key can raise it. */
const UNIQUE_VIOLATION = '23505';

const columnsOf = ({ limits, concurrency, shadow }: PlanSettings) => [limits && JSON.stringify(limits), concurrency, shadow];

/** The plan so named, locked until the transaction ends so that no delete of it commits meanwhile; undefined for none. */
export async function lockPlanRow(tx: Queryable, name: string): Promise<PlanRecord | undefined> {
  const [row] = await tx.query<PlanRow>(statements.forShare, [name]);
  return row && recordOf(row);
}

/**
 * The plans table: each change runs on the caller's transaction (`target`), so that it and its
 * audit entry (rules.ts) commit together; reads run on the database unless given one.
 */
export function createPlansRepository(db: Database) {
  return {
    /** Every plan, by name. */
    async all(target: Queryable = db): Promise<PlanRecord[]> {
      return (await target.query<PlanRow>(statements.all)).map(recordOf);
    },

    async get(name: string, target: Queryable = db): Promise<PlanRecord | undefined> {
      const [row] = await target.query<PlanRow>(statements.get, [name]);
      return row && recordOf(row);
    },

    /** The plan, locked against concurrent changes, deletes and new keys of it until the transaction ends; undefined for none. */
    async lockForChange(tx: Queryable, name: string): Promise<PlanRecord | undefined> {
      const [row] = await tx.query<PlanRow>(statements.forChange, [name]);
      return row && recordOf(row);
    },

    /** Stores a plan; a PlanNameTakenError when one has its name. */
    async insert(target: Queryable, name: string, settings: PlanSettings): Promise<PlanRecord> {
      try {
        const [row] = await target.query<PlanRow>(statements.insert, [name, ...columnsOf(settings)]);
        return recordOf(row!);
      } catch (error) {
        if ((error as { code?: unknown }).code === UNIQUE_VIOLATION) throw new PlanNameTakenError(name, { cause: error });
        throw error;
      }
    },

    async update(tx: Queryable, name: string, settings: PlanSettings): Promise<PlanRecord> {
      const [row] = await tx.query<PlanRow>(statements.update, [name, ...columnsOf(settings)]);
      return recordOf(row!);
    },

    async delete(tx: Queryable, name: string): Promise<void> {
      await tx.query(statements.delete, [name]);
    },

    /** How many keys of the plan work (not revoked, not expired). */
    /** The working keys of the plan; `onItsWindows`: only those without windows of their own. */
    async workingKeys(tx: Queryable, name: string, { onItsWindows = false } = {}): Promise<number> {
      const [row] = await tx.query<{ count: number }>(onItsWindows ? statements.workingKeysOnItsWindows : statements.workingKeys, [name]);
      return row!.count;
    },
  };
}

export type PlansRepository = ReturnType<typeof createPlansRepository>;
