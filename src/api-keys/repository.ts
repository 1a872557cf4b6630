import { generateKey, hashKey } from './format.js';
import type { KeyState } from './lifecycle.js';
import type { Database, Queryable } from '../platform/db/database.js';
import { ownLimits, PLAN_LIMITS, type Limits, type Plan } from './plans.js';
import { recordAudit, type Actor } from '../admin/audit-repository.js';
import { KeyStateError } from '../platform/domain-errors.js';

/** What a request learns from its key: who it is and what it may do. */
export interface ApiKeyIdentity extends Limits {
  id: number;
  /** The rate-limit quota the key counts in: shared by every key rotated from the same first key. */
  quotaId: number;
  plan: Plan;
  readOnly: boolean;
  /** When the key stops working, in ms since the epoch; null for never. */
  expiresAt: number | null;
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
}

const limitsOf = (row: Pick<ApiKeyRow, 'plan' | 'per_minute' | 'per_day'>): Limits =>
  row.plan === 'enterprise' ? { perMinute: row.per_minute!, perDay: row.per_day! } : PLAN_LIMITS[row.plan];

const iso = (value: Date | null) => value && new Date(value).toISOString();

const COLUMNS = 'id, name, plan, per_minute, per_day, read_only, quota_id, created_at, expires_at, revoked_at, replaced_by';

/** A revoked key is revoked, also when it was rotated with no overlap; a rotated one stays rotated once its overlap ends. */
const STATE = `CASE WHEN revoked_at IS NOT NULL THEN 'revoked' WHEN replaced_by IS NOT NULL THEN 'rotated'
                    WHEN expires_at <= now() THEN 'expired' ELSE 'active' END`;
const RECORD_COLUMNS = `${COLUMNS}, ${STATE} AS state`;

const USABLE = 'revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())';

const statements = {
  insert: {
    name: 'api_keys_insert',
    text: `INSERT INTO api_keys (name, plan, per_minute, per_day, key_hash, expires_at, read_only, quota_id)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING ${RECORD_COLUMNS}`,
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
    text: `UPDATE api_keys SET plan = $2, per_minute = $3, per_day = $4, name = CASE WHEN id = $1 THEN $5 ELSE name END
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
}

/** A change of a key's plan, limits or name; absent fields keep their value. */
export interface ApiKeyChange {
  plan?: Plan;
  perMinute?: number;
  perDay?: number;
  name?: string;
}

/** A new key: the only time its secret exists outside its holder's hands. */
export interface IssuedApiKey {
  id: number;
  key: string;
  record: ApiKeyRecord;
}

/** How a change is made and recorded: in the caller's transaction (Idempotency-Key), and by whom (the audit trail). */
export interface ChangeOptions {
  tx?: Queryable;
  actor?: Actor;
}

type ApiKeyRecordRow = ApiKeyRow & { state: KeyState };

const identityOf = (row: ApiKeyRow): ApiKeyIdentity => ({
  id: row.id,
  quotaId: row.quota_id ?? row.id,
  plan: row.plan,
  ...limitsOf(row),
  readOnly: row.read_only,
  expiresAt: row.expires_at && new Date(row.expires_at).getTime(),
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
});

export function createApiKeysRepository(db: Database) {
  async function insert(target: Queryable, key: NewApiKey, quotaId: number | null): Promise<IssuedApiKey> {
    const secret = generateKey();
    const [row] = await target.query<ApiKeyRecordRow>(statements.insert, [
      key.name ?? '',
      key.plan,
      key.limits?.perMinute ?? null,
      key.limits?.perDay ?? null,
      hashKey(secret),
      key.expiresAt ?? null,
      key.readOnly ?? false,
      quotaId,
    ]);
    return { id: row!.id, key: secret, record: recordOf(row!) };
  }

  /** Runs a change and its audit entry together: in the caller's transaction, or in one of their own. */
  const atomically = <T>(tx: Queryable | undefined, work: (target: Queryable) => Promise<T>) => (tx ? work(tx) : db.transaction(work));

  /** The key for a change, locked; undefined when there is none; a KeyStateError when it is revoked or rotated. */
  async function changeable(tx: Queryable, id: number, change: string): Promise<ApiKeyRecordRow | undefined> {
    const [row] = await tx.query<ApiKeyRecordRow>(statements.forChange, [id]);
    if (!row) return undefined;
    if (row.revoked_at) throw new KeyStateError(`API key ${id} is revoked; ${change}`);
    if (row.replaced_by !== null) throw new KeyStateError(`API key ${id} was rotated into key ${row.replaced_by}; ${change}`);
    return row;
  }

  return {
    /** Creates a key and returns it with its secret. */
    create: (key: NewApiKey, { tx, actor }: ChangeOptions = {}): Promise<IssuedApiKey> =>
      atomically(tx, async (target) => {
        const issued = await insert(target, key, null);
        if (actor) {
          const { plan, name, perMinute, perDay, expiresAt, readOnly } = issued.record;
          await recordAudit(target, actor, 'key.create', issued.id, { plan, name, perMinute, perDay, expiresAt, readOnly });
        }
        return issued;
      }),

    /**
     * Replaces a key with a new one of the same plan, limits, name, scope and quota; the old one
     * keeps working for `overlapSeconds` more (never longer than it would have), or stops at once
     * for 0, and so do the keys rotated into it still in their overlap. Undefined when there is no
     * key with that id.
     */
    rotate(id: number, overlapSeconds: number, { expiresAt, actor }: { expiresAt?: Date; actor?: Actor } = {}) {
      return db.transaction(async (tx): Promise<IssuedApiKey | undefined> => {
        const old = await changeable(tx, id, 'create a new key instead');
        if (!old) return undefined;
        const created = await insert(
          tx,
          {
            plan: old.plan,
            name: old.name,
            limits: old.plan === 'enterprise' ? limitsOf(old) : undefined,
            readOnly: old.read_only,
            expiresAt,
          },
          old.quota_id ?? old.id,
        );
        const retired = await tx.query<{ id: number }>(statements.retire, [id, created.id, overlapSeconds, old.quota_id ?? old.id]);
        const sameQuota = retired.map((row) => row.id).filter((retiredId) => retiredId !== id);
        if (actor)
          await recordAudit(tx, actor, 'key.rotate', id, {
            newKeyId: created.id,
            overlapSeconds,
            ...(sameQuota.length > 0 && { sameQuota: sameQuota.sort((a, b) => a - b) }),
          });
        return created;
      });
    },

    /**
     * Changes a key's plan, limits or name, effective wherever the key is cached as soon as the
     * change notice arrives. The plan and limits are the quota's: the keys rotated into this one
     * and still in their overlap take them too, so a cut binds every key counting in the quota.
     * Undefined when there is no such key; a LimitsError when the limits do not go with the plan;
     * a KeyStateError for a revoked or rotated key.
     */
    update(id: number, change: ApiKeyChange, { actor }: ChangeOptions = {}) {
      return db.transaction(async (tx): Promise<ApiKeyRecord | undefined> => {
        const row = await changeable(tx, id, 'change its successor, or create a new key');
        if (!row) return undefined;
        const before = recordOf(row);
        const plan = change.plan ?? before.plan;
        // An enterprise key keeps the limits it has unless given new ones; another plan's come from its table.
        const kept = plan === 'enterprise' && before.plan === 'enterprise' ? before : undefined;
        const limits = ownLimits(plan, change.perMinute ?? kept?.perMinute, change.perDay ?? kept?.perDay);
        const name = change.name ?? before.name;
        const after = { plan, ...(limits ?? PLAN_LIMITS[plan as Exclude<Plan, 'enterprise'>]), name };
        const unchanged = (['plan', 'perMinute', 'perDay', 'name'] as const).every((field) => after[field] === before[field]);
        if (unchanged) return before;
        const rows = await tx.query<ApiKeyRecordRow>(statements.update, [
          id,
          plan,
          limits?.perMinute ?? null,
          limits?.perDay ?? null,
          name,
          before.quotaId,
        ]);
        const sameQuota = rows.filter((updated) => updated.id !== id).map((updated) => updated.id);
        if (actor) {
          const { perMinute, perDay } = before;
          await recordAudit(tx, actor, 'key.update', id, {
            before: { plan: before.plan, perMinute, perDay, name: before.name },
            after,
            ...(sameQuota.length > 0 && { sameQuota }),
          });
        }
        return recordOf(rows.find((updated) => updated.id === id)!);
      });
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

    /**
     * Revokes a key, and the keys rotated into it that still work (a cancellation that revokes the
     * current key leaves no older one working out its overlap); never the key it was rotated into.
     * Undefined when there is no key with that id. Revoking twice is harmless (and recorded once).
     */
    revoke(id: number, { actor }: ChangeOptions = {}) {
      return db.transaction(async (tx): Promise<ApiKeyRecord | undefined> => {
        const [row] = await tx.query<ApiKeyRecordRow>(statements.forChange, [id]);
        if (!row || row.revoked_at) return row && recordOf(row);
        const rows = await tx.query<ApiKeyRecordRow>(statements.revoke, [id, row.quota_id ?? row.id]);
        const sameQuota = rows
          .filter((revoked) => revoked.id !== id)
          .map((revoked) => revoked.id)
          .sort((a, b) => a - b);
        if (actor) await recordAudit(tx, actor, 'key.revoke', id, sameQuota.length > 0 ? { sameQuota } : {});
        return recordOf(rows.find((revoked) => revoked.id === id)!);
      });
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
