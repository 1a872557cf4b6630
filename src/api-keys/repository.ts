import { generateKey, hashKey } from './format.js';
import type { KeyState } from './lifecycle.js';
import type { Database, Queryable } from '../platform/db/database.js';
import { PLAN_LIMITS, type Limits, type Plan } from './plans.js';

/** What a request learns from its key: who it is and what it may do. */
export interface ApiKeyIdentity extends Limits {
  id: number;
  /** The rate-limit quota the key counts in: shared by every key rotated from the same first key. */
  quotaId: number;
  plan: Plan;
  readOnly: boolean;
  /** When the key stops working, in ms since the epoch; null for never. */
  expiresAt: number | null;
  /** False in shadow mode: past its limits it is served, and counted as a would-be refusal. */
  enforceLimits: boolean;
  /** Its own limit of requests in flight; null for its plan's. */
  concurrency: number | null;
}

/** A key as listed to operators: never the key, never its hash. */
export interface ApiKeyRecord {
  id: number;
  name: string;
  plan: Plan;
  perMinute: number;
  perDay: number;
  readOnly: boolean;
  createdAt: string;
  expiresAt: string | null;
  revokedAt: string | null;
  /** The key this one was rotated into. */
  replacedBy: number | null;
  state: KeyState;
  /** The rate-limit quota the key counts in (see ApiKeyIdentity). */
  quotaId: number;
  enforceLimits: boolean;
  concurrency: number | null;
}

interface ApiKeyRow {
  id: number;
  name: string;
  plan: Plan;
  per_minute: number | null;
  per_day: number | null;
  read_only: boolean;
  quota_id: number | null;
  created_at: Date;
  expires_at: Date | null;
  revoked_at: Date | null;
  replaced_by: number | null;
  enforce_limits: boolean;
  concurrency: number | null;
}

const limitsOf = (row: Pick<ApiKeyRow, 'plan' | 'per_minute' | 'per_day'>): Limits =>
  row.plan === 'enterprise' ? { perMinute: row.per_minute!, perDay: row.per_day! } : PLAN_LIMITS[row.plan];

const iso = (value: Date | null) => value && new Date(value).toISOString();

const COLUMNS =
  'id, name, plan, per_minute, per_day, read_only, quota_id, created_at, expires_at, revoked_at, replaced_by, enforce_limits, concurrency';

/** A revoked key is revoked, also when it was rotated with no overlap; a rotated one stays rotated once its overlap ends. */
const STATE = `CASE WHEN revoked_at IS NOT NULL THEN 'revoked' WHEN replaced_by IS NOT NULL THEN 'rotated'
                    WHEN expires_at <= now() THEN 'expired' ELSE 'active' END`;
const RECORD_COLUMNS = `${COLUMNS}, ${STATE} AS state`;

const USABLE = 'revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())';

const statements = {
  insert: {
    name: 'api_keys_insert',
    text: `INSERT INTO api_keys (name, plan, per_minute, per_day, key_hash, expires_at, read_only, quota_id, enforce_limits, concurrency)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING ${RECORD_COLUMNS}`,
  },
  list: { name: 'api_keys_list', text: `SELECT ${RECORD_COLUMNS} FROM api_keys ORDER BY id` },
  get: { name: 'api_keys_get', text: `SELECT ${RECORD_COLUMNS} FROM api_keys WHERE id = $1` },
  // The key, and the keys rotated into it still in their overlap, which would otherwise outlive it: the
  // older keys of its quota (a quota's keys are one chain, each rotated into the next one made). One
  // statement, so one notice names them all.
  revoke: {
    name: 'api_keys_revoke',
    text: `UPDATE api_keys SET revoked_at = now()
           WHERE id = $1 OR ((quota_id = $2 OR id = $2) AND id < $1 AND revoked_at IS NULL AND expires_at > now())
           RETURNING ${RECORD_COLUMNS}`,
  },
  // Revoked keys are not usable; expired ones are returned with their expiry, which the caller
  // checks against its clock on every request, so expiry needs no notice.
  findUsable: {
    name: 'api_keys_find_usable',
    text: `SELECT ${COLUMNS} FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL`,
  },
  forChange: { name: 'api_keys_for_change', text: `SELECT ${RECORD_COLUMNS} FROM api_keys WHERE id = $1 FOR UPDATE` },
  // The key, and the keys rotated into it still in their overlap, which would otherwise outlive it
  // (a 30-day overlap rotated again with none): they stop when it does.
  retire: {
    name: 'api_keys_retire',
    text: `UPDATE api_keys
           SET replaced_by = CASE WHEN id = $1 THEN $2 ELSE replaced_by END,
               expires_at = least(coalesce(expires_at, 'infinity'), now() + make_interval(secs => $3::int)),
               revoked_at = CASE WHEN $3::int = 0 THEN now() END
           WHERE id = $1 OR ((quota_id = $4 OR id = $4) AND id < $1 AND revoked_at IS NULL
                             AND expires_at > now() + make_interval(secs => $3::int))
           RETURNING id`,
  },
  // The key, and the rotated keys of its quota still in their overlap: one statement, so one notice names them all.
  // Limits stay on each key's row, so the limiter reads them from the key presented, with no lookup of the quota's newest key.
  update: {
    name: 'api_keys_update',
    text: `UPDATE api_keys SET plan = $2, per_minute = $3, per_day = $4, name = CASE WHEN id = $1 THEN $5 ELSE name END,
                              enforce_limits = $7, concurrency = $8
           WHERE id = $1 OR ((quota_id = $6 OR id = $6) AND revoked_at IS NULL AND expires_at > now())
           RETURNING ${RECORD_COLUMNS}`,
  },
  // Usable keys for the key filter (src/api-keys/key-filter.ts): expired ones would only be refused.
  countUsable: { name: 'api_keys_count_usable', text: `SELECT count(*)::int AS count FROM api_keys WHERE ${USABLE}` },
  usableHashes: {
    name: 'api_keys_usable_hashes',
    text: `SELECT id, key_hash FROM api_keys WHERE id > $1 AND ${USABLE} ORDER BY id LIMIT $2`,
  },
  usableHashesOf: {
    name: 'api_keys_usable_hashes_of',
    text: `SELECT id, key_hash FROM api_keys WHERE id = ANY($1::bigint[]) AND ${USABLE}`,
  },
} as const;

/** The admin listing's filters, as SQL conditions on their parameter. */
const FILTERS = { plan: 'plan = $', name: 'name = $', state: `${STATE} = $` } as const;

/**
 * A page of keys after an id, with the filters given and no others: one statement per combination,
 * so each is planned for its own (the name and plan indexes of migrations/008), where one
 * statement with optional filters would be planned for none.
 */
function pageStatement(filters: Array<keyof typeof FILTERS>) {
  const conditions = ['id > $1', ...filters.map((filter, i) => `${FILTERS[filter]}${i + 2}`)];
  return {
    name: `api_keys_page_${filters.join('_') || 'all'}`,
    text: `SELECT ${RECORD_COLUMNS} FROM api_keys WHERE ${conditions.join(' AND ')} ORDER BY id LIMIT $${filters.length + 2}`,
  };
}

export interface NewApiKey {
  plan: Plan;
  name?: string;
  /** Required for enterprise keys, refused for the others (see ownLimits; the table enforces it too). */
  limits?: Limits;
  expiresAt?: Date;
  readOnly?: boolean;
  /** False for shadow mode; true by default. */
  enforceLimits?: boolean;
  /** The key's own limit of requests in flight; by default its plan's. */
  concurrency?: number | null;
}

/** A new key: the only time its secret exists outside its holder's hands. */
export interface IssuedApiKey {
  id: number;
  key: string;
  record: ApiKeyRecord;
}

/** The plan, limits, name and enforcement a key and the rotated keys of its quota still in their overlap take (limits for enterprise only). */
export interface QuotaSettings {
  plan: Plan;
  limits: Limits | undefined;
  name: string;
  quotaId: number;
  enforceLimits: boolean;
  concurrency: number | null;
}

type ApiKeyRecordRow = ApiKeyRow & { state: KeyState };

const identityOf = (row: ApiKeyRow): ApiKeyIdentity => ({
  id: row.id,
  quotaId: row.quota_id ?? row.id,
  plan: row.plan,
  ...limitsOf(row),
  readOnly: row.read_only,
  expiresAt: row.expires_at && new Date(row.expires_at).getTime(),
  enforceLimits: row.enforce_limits,
  concurrency: row.concurrency,
});

const recordOf = (row: ApiKeyRecordRow): ApiKeyRecord => ({
  id: row.id,
  name: row.name,
  plan: row.plan,
  ...limitsOf(row),
  readOnly: row.read_only,
  createdAt: iso(row.created_at)!,
  expiresAt: iso(row.expires_at),
  revokedAt: iso(row.revoked_at),
  replacedBy: row.replaced_by,
  state: row.state,
  quotaId: row.quota_id ?? row.id,
  enforceLimits: row.enforce_limits,
  concurrency: row.concurrency,
});

/**
 * The api_keys table: its statements and the rows as records. What a change may do, and its audit
 * entry, are the key rules' (rules.ts), which run these in their transaction (`tx`).
 */
export function createApiKeysRepository(db: Database) {
  return {
    /**
     * Stores a key with a fresh secret, in the quota given (a rotation's) or a quota of its own;
     * checks no rule and records nothing: the key rules' create does both.
     */
    async create(key: NewApiKey, { tx = db, quotaId = null }: { tx?: Queryable; quotaId?: number | null } = {}): Promise<IssuedApiKey> {
      const secret = generateKey();
      const [row] = await tx.query<ApiKeyRecordRow>(statements.insert, [
        key.name ?? '',
        key.plan,
        key.limits?.perMinute ?? null,
        key.limits?.perDay ?? null,
        hashKey(secret),
        key.expiresAt ?? null,
        key.readOnly ?? false,
        quotaId,
        key.enforceLimits ?? true,
        key.concurrency ?? null,
      ]);
      return { id: row!.id, key: secret, record: recordOf(row!) };
    },

    /** The key, locked until the transaction ends; undefined when there is none. */
    async lockForChange(tx: Queryable, id: number): Promise<ApiKeyRecord | undefined> {
      const [row] = await tx.query<ApiKeyRecordRow>(statements.forChange, [id]);
      return row && recordOf(row);
    },

    /**
     * Marks the key replaced by `successorId`, working for `overlapSeconds` more (never longer than
     * it would have; revoked at once for 0), and so the keys of its quota rotated into it still in
     * their overlap; the ids of every key retired.
     */
    async retire(tx: Queryable, id: number, successorId: number, overlapSeconds: number, quotaId: number): Promise<number[]> {
      return (await tx.query<{ id: number }>(statements.retire, [id, successorId, overlapSeconds, quotaId])).map((row) => row.id);
    },

    /** Sets the key's plan, limits, name and enforcement, and the plan, limits and enforcement of the keys of its quota still in their overlap; those keys. */
    async updateQuota(
      tx: Queryable,
      id: number,
      { plan, limits, name, quotaId, enforceLimits, concurrency }: QuotaSettings,
    ): Promise<ApiKeyRecord[]> {
      const rows = await tx.query<ApiKeyRecordRow>(statements.update, [
        id,
        plan,
        limits?.perMinute ?? null,
        limits?.perDay ?? null,
        name,
        quotaId,
        enforceLimits,
        concurrency,
      ]);
      return rows.map(recordOf);
    },

    /** Revokes the key, and the older keys of its quota still working out their overlap; those keys. */
    async revokeWithOverlaps(tx: Queryable, id: number, quotaId: number): Promise<ApiKeyRecord[]> {
      return (await tx.query<ApiKeyRecordRow>(statements.revoke, [id, quotaId])).map(recordOf);
    },

    async list(): Promise<ApiKeyRecord[]> {
      return (await db.query<ApiKeyRecordRow>(statements.list)).map(recordOf);
    },

    async get(id: number): Promise<ApiKeyRecord | undefined> {
      const [row] = await db.query<ApiKeyRecordRow>(statements.get, [id]);
      return row && recordOf(row);
    },

    /** A page of keys in id order after `afterId`, filtered; `nextAfterId` when more follow. */
    async page(query: { limit: number; afterId: number; plan?: Plan; state?: KeyState; name?: string }) {
      const filters = (['plan', 'name', 'state'] as const).filter((filter) => query[filter] !== undefined);
      const rows = await db.query<ApiKeyRecordRow>(pageStatement(filters), [
        query.afterId,
        ...filters.map((filter) => query[filter]),
        query.limit + 1,
      ]);
      const keys = rows.slice(0, query.limit).map(recordOf);
      return { keys, nextAfterId: rows.length > query.limit ? keys.at(-1)!.id : undefined };
    },

    /** The key with this hash (base64) unless it is revoked; expired keys come with their expiry. */
    async findUsable(hash: string): Promise<ApiKeyIdentity | undefined> {
      const [row] = await db.query<ApiKeyRow>(statements.findUsable, [Buffer.from(hash, 'base64')]);
      return row && identityOf(row);
    },

    async countUsable(): Promise<number> {
      const [row] = await db.query<{ count: number }>(statements.countUsable);
      return row!.count;
    },

    /** The hashes (base64) of usable keys after an id, in id order, `limit` of them: a page of all there are. */
    async usableHashes(afterId: number, limit: number): Promise<Array<{ id: number; hash: string }>> {
      return hashesOf(await db.query<HashRow>(statements.usableHashes, [afterId, limit]));
    },

    /** The hashes (base64) of those of these keys that are usable. */
    async usableHashesOf(ids: number[]): Promise<Array<{ id: number; hash: string }>> {
      return hashesOf(await db.query<HashRow>(statements.usableHashesOf, [ids]));
    },
  };
}

interface HashRow {
  id: number;
  key_hash: Buffer | Uint8Array;
}

const hashesOf = (rows: HashRow[]) => rows.map((row) => ({ id: row.id, hash: Buffer.from(row.key_hash).toString('base64') }));

export type ApiKeysRepository = ReturnType<typeof createApiKeysRepository>;
