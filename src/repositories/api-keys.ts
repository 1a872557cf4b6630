import { generateKey, hashKey } from '../api-key-format.js';
import type { Database, Queryable } from '../db/database.js';
import { PLAN_LIMITS, type Limits, type Plan } from '../plans.js';

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

const statements = {
  insert: {
    name: 'api_keys_insert',
    text: `INSERT INTO api_keys (name, plan, per_minute, per_day, key_hash, expires_at, read_only, quota_id)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id`,
  },
  list: { name: 'api_keys_list', text: `SELECT ${COLUMNS} FROM api_keys ORDER BY id` },
  revoke: {
    name: 'api_keys_revoke',
    text: 'UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1 RETURNING id',
  },
  // Revoked keys are not usable; expired ones are returned with their expiry, which the caller
  // checks against its clock on every request, so expiry needs no notice.
  findUsable: {
    name: 'api_keys_find_usable',
    text: `SELECT ${COLUMNS} FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL`,
  },
  forRotation: { name: 'api_keys_for_rotation', text: `SELECT ${COLUMNS} FROM api_keys WHERE id = $1 FOR UPDATE` },
  retire: {
    name: 'api_keys_retire',
    text: `UPDATE api_keys
           SET replaced_by = $2,
               expires_at = least(coalesce(expires_at, 'infinity'), now() + make_interval(secs => $3::int)),
               revoked_at = CASE WHEN $3::int = 0 THEN now() END
           WHERE id = $1`,
  },
} as const;

export interface NewApiKey {
  plan: Plan;
  name?: string;
  /** Required for enterprise keys, refused for the others (the table enforces it too). */
  limits?: Limits;
  expiresAt?: Date;
  readOnly?: boolean;
}

const identityOf = (row: ApiKeyRow): ApiKeyIdentity => ({
  id: row.id,
  quotaId: row.quota_id ?? row.id,
  plan: row.plan,
  ...limitsOf(row),
  readOnly: row.read_only,
  expiresAt: row.expires_at && new Date(row.expires_at).getTime(),
});

export class RotationError extends Error {}

export function createApiKeysRepository(db: Database) {
  async function insert(target: Queryable, key: NewApiKey, quotaId: number | null): Promise<{ id: number; key: string }> {
    const secret = generateKey();
    const [row] = await target.query<{ id: number }>(statements.insert, [
      key.name ?? '',
      key.plan,
      key.limits?.perMinute ?? null,
      key.limits?.perDay ?? null,
      hashKey(secret),
      key.expiresAt ?? null,
      key.readOnly ?? false,
      quotaId,
    ]);
    return { id: row!.id, key: secret };
  }

  return {
    /** Creates a key and returns it: the only time it exists outside its holder's hands. */
    create: (key: NewApiKey) => insert(db, key, null),

    /**
     * Replaces a key with a new one of the same plan, limits, name, scope and quota; the old one
     * keeps working for `overlapSeconds` more (never longer than it would have), or stops at once
     * for 0. Undefined when there is no key with that id.
     */
    rotate(id: number, overlapSeconds: number, expiresAt?: Date): Promise<{ id: number; key: string } | undefined> {
      return db.transaction(async (tx) => {
        const [old] = await tx.query<ApiKeyRow>(statements.forRotation, [id]);
        if (!old) return undefined;
        if (old.revoked_at) throw new RotationError(`API key ${id} is revoked; create a new key instead`);
        if (old.replaced_by !== null) throw new RotationError(`API key ${id} was already rotated into key ${old.replaced_by}`);
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
        await tx.query(statements.retire, [id, created.id, overlapSeconds]);
        return created;
      });
    },

    async list(): Promise<ApiKeyRecord[]> {
      const rows = await db.query<ApiKeyRow>(statements.list);
      return rows.map((row) => ({
        id: row.id,
        name: row.name,
        plan: row.plan,
        ...limitsOf(row),
        readOnly: row.read_only,
        createdAt: iso(row.created_at)!,
        expiresAt: iso(row.expires_at),
        revokedAt: iso(row.revoked_at),
        replacedBy: row.replaced_by,
      }));
    },

    /** Revokes a key; false when there is no key with that id. Revoking twice is harmless. */
    async revoke(id: number): Promise<boolean> {
      return (await db.query(statements.revoke, [id])).length > 0;
    },

    /** The key with this hash (base64) unless it is revoked; expired keys come with their expiry. */
    async findUsable(hash: string): Promise<ApiKeyIdentity | undefined> {
      const [row] = await db.query<ApiKeyRow>(statements.findUsable, [Buffer.from(hash, 'base64')]);
      return row && identityOf(row);
    },
  };
}

export type ApiKeysRepository = ReturnType<typeof createApiKeysRepository>;
