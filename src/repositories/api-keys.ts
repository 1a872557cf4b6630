import { createHash, randomBytes } from 'node:crypto';
import type { Queryable } from '../db/database.js';
import { PLAN_LIMITS, type Limits, type Plan } from '../plans.js';

/** 32 random bytes (256 bits) behind a recognisable prefix. */
const KEY_PREFIX = 'psk_';
const KEY_FORMAT = /^psk_[A-Za-z0-9_-]{43}$/;

export const isWellFormedKey = (key: string) => KEY_FORMAT.test(key);

/** Keys are looked up, stored and compared only as their SHA-256 hash. */
export const hashKey = (key: string) => createHash('sha256').update(key).digest();

/** What a request learns from its key: who it is and what it may do. */
export interface ApiKeyIdentity extends Limits {
  id: number;
  plan: Plan;
}

/** A key as listed to operators: never the key, never its hash. */
export interface ApiKeyRecord {
  id: number;
  name: string;
  plan: Plan;
  perMinute: number;
  perDay: number;
  createdAt: string;
  revokedAt: string | null;
}

interface ApiKeyRow {
  id: number;
  name: string;
  plan: Plan;
  per_minute: number | null;
  per_day: number | null;
  created_at: Date;
  revoked_at: Date | null;
}

const limitsOf = (row: Pick<ApiKeyRow, 'plan' | 'per_minute' | 'per_day'>): Limits =>
  row.plan === 'enterprise' ? { perMinute: row.per_minute!, perDay: row.per_day! } : PLAN_LIMITS[row.plan];

const statements = {
  insert: {
    name: 'api_keys_insert',
    text: 'INSERT INTO api_keys (name, plan, per_minute, per_day, key_hash) VALUES ($1, $2, $3, $4, $5) RETURNING id',
  },
  list: {
    name: 'api_keys_list',
    text: 'SELECT id, name, plan, per_minute, per_day, created_at, revoked_at FROM api_keys ORDER BY id',
  },
  revoke: {
    name: 'api_keys_revoke',
    text: 'UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1 RETURNING id',
  },
  active: {
    name: 'api_keys_active',
    text: 'SELECT id, plan, per_minute, per_day, key_hash FROM api_keys WHERE revoked_at IS NULL AND ($1::bigint IS NULL OR id = $1)',
  },
} as const;

export interface NewApiKey {
  plan: Plan;
  name?: string;
  /** Required for enterprise keys, refused for the others (the table enforces it too). */
  limits?: Limits;
}

export function createApiKeysRepository(db: Queryable) {
  /** Active keys by hash: all of them, or the one with this id when it is active. */
  async function active(id: number | null = null): Promise<Array<{ hash: Buffer; identity: ApiKeyIdentity }>> {
    const rows = await db.query<Pick<ApiKeyRow, 'id' | 'plan' | 'per_minute' | 'per_day'> & { key_hash: Buffer | Uint8Array }>(
      statements.active,
      [id],
    );
    return rows.map((row) => ({
      hash: Buffer.from(row.key_hash),
      identity: { id: row.id, plan: row.plan, ...limitsOf(row) },
    }));
  }

  return {
    /** Creates a key and returns it: the only time it exists outside its holder's hands. */
    async create({ plan, name = '', limits }: NewApiKey): Promise<{ id: number; key: string }> {
      const key = KEY_PREFIX + randomBytes(32).toString('base64url');
      const [row] = await db.query<{ id: number }>(statements.insert, [
        name,
        plan,
        limits?.perMinute ?? null,
        limits?.perDay ?? null,
        hashKey(key),
      ]);
      return { id: row!.id, key };
    },

    async list(): Promise<ApiKeyRecord[]> {
      const rows = await db.query<ApiKeyRow>(statements.list);
      return rows.map((row) => ({
        id: row.id,
        name: row.name,
        plan: row.plan,
        ...limitsOf(row),
        createdAt: new Date(row.created_at).toISOString(),
        revokedAt: row.revoked_at && new Date(row.revoked_at).toISOString(),
      }));
    },

    /** Revokes a key; false when there is no key with that id. Revoking twice is harmless. */
    async revoke(id: number): Promise<boolean> {
      return (await db.query(statements.revoke, [id])).length > 0;
    },

    active,
  };
}

export type ApiKeysRepository = ReturnType<typeof createApiKeysRepository>;
