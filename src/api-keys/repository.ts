import { generateKey, hashKey } from './format.js';
import type { ApiKeyIdentity, CreditBalance } from './identity.js';
import type { KeyState } from './lifecycle.js';
import type { Database, Queryable } from '../platform/db/database.js';
import { normalizeLimits, type LimitWindow, type Limits } from '../plans/limits.js';
import { limitOf } from '../plans/windows.js';
import { pageStatement, statements } from './statements.js';
import { UnknownCustomerError } from './errors.js';

/** A key as listed to operators: never the key, never its hash. */
export interface ApiKeyRecord {
  id: number;
  name: string;
  /** A plan in the plans table (migrations/019); a revoked key may keep the name of a plan deleted since. */
  plan: string;
  /** Its own windows, which replace its plan's; null: its plan's. */
  limits: Limits | null;
  /** The limit of its window named minute (its own, else its plan's); null for none. */
  perMinute: number | null;
  /** The limit of its window named day (its own, else its plan's); null for none. */
  perDay: number | null;
  readOnly: boolean;
  createdAt: string;
  expiresAt: string | null;
  revokedAt: string | null;
  /** The key this one was rotated into. */
  replacedBy: number | null;
  state: KeyState;
  /** The rate-limit quota the key counts in (see ApiKeyIdentity, identity.ts). */
  quotaId: number;
  enforceLimits: boolean;
  concurrency: number | null;
  /** The customer the key belongs to; null for a key of its own. */
  customerId: number | null;
  /** The web origins it may be used from (see ApiKeyIdentity); null for any. */
  allowedOrigins: string[] | null;
}

interface ApiKeyRow {
  id: number;
  name: string;
  plan: string;
  limits: LimitWindow[] | null;
  read_only: boolean;
  quota_id: number | null;
  created_at: Date;
  expires_at: Date | null;
  revoked_at: Date | null;
  replaced_by: number | null;
  enforce_limits: boolean;
  concurrency: number | null;
  customer_id: number | null;
  allowed_origins: string[] | null;
}

/** Stored windows (jsonb) in the limiter's form; null for none. */
const windowsOf = (stored: LimitWindow[] | null): Limits | null => stored && normalizeLimits(stored);

/** Windows as the jsonb columns hold them: both drivers take JSON text for jsonb. */
export const storedWindows = (windows: Limits | null | undefined): string | null => (windows ? JSON.stringify(windows) : null);

const iso = (value: Date | null) => value && new Date(value).toISOString();

export interface NewApiKey {
  plan: string;
  name?: string;
  /** Its own windows, which replace its plan's; by default (null) its plan's. Required on a plan without limits (the key rules check). */
  limits?: Limits | null;
  expiresAt?: Date;
  readOnly?: boolean;
  /** False for shadow mode; true by default. */
  enforceLimits?: boolean;
  /** The key's own limit of requests in flight; by default its plan's. */
  concurrency?: number | null;
  /** The customer it belongs to (an UnknownCustomerError when there is none with this id); by default none. */
  customerId?: number | null;
  /** The web origins it may be used from, checked (origins.ts); by default (null) any. */
  allowedOrigins?: string[] | null;
}

/** A new key: the only time its secret exists outside its holder's hands. */
export interface IssuedApiKey {
  id: number;
  key: string;
  record: ApiKeyRecord;
}

/**
 * The plan, limits, name, enforcement and origins a key and the rotated keys of its quota still in their overlap take
 * (limits null: the plan's; name the key's alone).
 */
export interface QuotaSettings {
  plan: string;
  limits: Limits | null;
  name: string;
  quotaId: number;
  enforceLimits: boolean;
  concurrency: number | null;
  allowedOrigins: string[] | null;
}

type ApiKeyRecordRow = ApiKeyRow & { state: KeyState; plan_limits: LimitWindow[] | null };

/** A usable key's row, with its customer's limits (null without a customer or limits) and its balances of credits (null without). */
type UsableKeyRow = ApiKeyRow & {
  customer_limits: LimitWindow[] | null;
  customer_concurrency: number | null;
  credits_id: number | null;
  credits_base: number | null;
  credits_version: number | null;
  credits_refill_at: Date | null;
  customer_credits_id: number | null;
  customer_credits_base: number | null;
  customer_credits_version: number | null;
  customer_credits_refill_at: Date | null;
};

/** A balance of credits of the key's row; null when the join found none. */
const balanceOf = (id: number | null, base: number | null, version: number | null, refillAt: Date | null): CreditBalance | null =>
  id === null ? null : { id, base: Number(base), version: version!, refillAt: refillAt && new Date(refillAt).getTime() };

const identityOf = (row: UsableKeyRow): ApiKeyIdentity => ({
  id: row.id,
  quotaId: row.quota_id ?? row.id,
  plan: row.plan,
  limits: windowsOf(row.limits),
  readOnly: row.read_only,
  allowedOrigins: row.allowed_origins,
  expiresAt: row.expires_at && new Date(row.expires_at).getTime(),
  enforceLimits: row.enforce_limits,
  concurrency: row.concurrency,
  customerId: row.customer_id,
  customerLimits: row.customer_limits === null ? null : { limits: windowsOf(row.customer_limits)!, concurrency: row.customer_concurrency },
  credits: balanceOf(row.credits_id, row.credits_base, row.credits_version, row.credits_refill_at),
  customerCredits: balanceOf(
    row.customer_credits_id,
    row.customer_credits_base,
    row.customer_credits_version,
    row.customer_credits_refill_at,
  ),
});

function recordOf(row: ApiKeyRecordRow): ApiKeyRecord {
  const limits = windowsOf(row.limits);
  const windows = limits ?? windowsOf(row.plan_limits);
  return {
    id: row.id,
    name: row.name,
    plan: row.plan,
    limits,
    perMinute: limitOf(windows, 'minute'),
    perDay: limitOf(windows, 'day'),
    readOnly: row.read_only,
    createdAt: iso(row.created_at)!,
    expiresAt: iso(row.expires_at),
    revokedAt: iso(row.revoked_at),
    replacedBy: row.replaced_by,
    state: row.state,
    quotaId: row.quota_id ?? row.id,
    enforceLimits: row.enforce_limits,
    concurrency: row.concurrency,
    customerId: row.customer_id,
    allowedOrigins: row.allowed_origins,
  };
}

/** PostgreSQL's foreign_key_violation, as both drivers report it: on an insert, only customer_id can raise it. */
const FOREIGN_KEY_VIOLATION = '23503';

/**
 * The api_keys table: its statements (statements.ts) run, and the rows as records. What a change
 * may do, and its audit entry, are the key rules' (rules.ts), which run these in their transaction (`tx`).
 */
export function createApiKeysRepository(db: Database) {
  return {
    /**
     * Stores a key with a fresh secret, in the quota given (a rotation's) or a quota of its own; an
     * UnknownCustomerError when its customerId names no customer. Checks no rule and records
     * nothing: the key rules' create does both.
     */
    async create(key: NewApiKey, { tx = db, quotaId = null }: { tx?: Queryable; quotaId?: number | null } = {}): Promise<IssuedApiKey> {
      const secret = generateKey();
      const [row] = await tx
        .query<ApiKeyRecordRow>(statements.insert, [
          key.name ?? '',
          key.plan,
          storedWindows(key.limits),
          hashKey(secret),
          key.expiresAt ?? null,
          key.readOnly ?? false,
          quotaId,
          key.enforceLimits ?? true,
          key.concurrency ?? null,
          key.customerId ?? null,
          key.allowedOrigins ?? null,
        ])
        .catch((error: unknown) => {
          if ((error as { code?: unknown }).code === FOREIGN_KEY_VIOLATION)
            throw new UnknownCustomerError(key.customerId!, { cause: error });
          throw error;
        });
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

    /** Sets the key's settings, and all but its name on the keys of its quota still in their overlap; those keys. */
    async updateQuota(
      tx: Queryable,
      id: number,
      { plan, limits, name, quotaId, enforceLimits, concurrency, allowedOrigins }: QuotaSettings,
    ): Promise<ApiKeyRecord[]> {
      const rows = await tx.query<ApiKeyRecordRow>(statements.update, [
        id,
        plan,
        storedWindows(limits),
        name,
        quotaId,
        enforceLimits,
        concurrency,
        allowedOrigins,
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
    async page(query: { limit: number; afterId: number; plan?: string; state?: KeyState; name?: string; customerId?: number }) {
      const filters = (['plan', 'name', 'state', 'customerId'] as const).filter((filter) => query[filter] !== undefined);
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
      const [row] = await db.query<UsableKeyRow>(statements.findUsable, [Buffer.from(hash, 'base64')]);
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
