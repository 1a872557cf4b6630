import type { Database, Queryable, Transaction } from '../platform/db/database.js';

/** The final response of a request sent with an Idempotency-Key, as every retry of it gets it. */
export interface StoredResponse<Body = unknown, Status extends number = number> {
  status: Status;
  location?: string;
  body: Body;
}

/** An idempotency key as one caller (an API key, or an admin token) sent it, and a digest of the request it came with. */
export interface IdempotencyClaim {
  ownerId: number;
  key: string;
  requestHash: string;
}

export type IdempotentOutcome<Response = StoredResponse> =
  /** The request ran now, and its response is stored for retries. */
  | { kind: 'first'; response: Response }
  /** An earlier request with this key ran; this is its response. */
  | { kind: 'replay'; response: Response }
  /** A request with this key is running now, on this instance or another. */
  | { kind: 'in-use' }
  /** This key was used for a different request. */
  | { kind: 'mismatch' };

type StoredRow = [requestHash: string, status: number, location: string | null, body: string];

/**
 * Where a kind of caller's keys are kept: the API's by API key (migrations/007), the admin API's
 * by admin token (migrations/008). Each has its own seed, which separates its advisory locks from
 * the other's and from every other use of hashtextextended's space.
 */
const TABLES = {
  api: { table: 'idempotency_keys', owner: 'api_key_id', lockSeed: 7_310_042_016 },
  admin: { table: 'admin_idempotency_keys', owner: 'admin_token_id', lockSeed: 7_310_042_017 },
} as const;

export type IdempotencyScope = keyof typeof TABLES;

function statementsFor(scope: IdempotencyScope) {
  const { table, owner, lockSeed } = TABLES[scope];
  return {
    find: {
      name: `${table}_find`,
      text: `SELECT request_hash, status, location, body FROM ${table} WHERE ${owner} = $1 AND key = $2`,
      rowMode: 'array',
    },
    // Held until the transaction ends: the request holding it is in flight, on whichever instance.
    lock: {
      name: `${table}_lock`,
      text: `SELECT pg_try_advisory_xact_lock(hashtextextended($1::text || ' ' || $2, ${lockSeed}))`,
      rowMode: 'array',
    },
    insert: {
      name: `${table}_insert`,
      text: `INSERT INTO ${table} (${owner}, key, request_hash, status, location, body) VALUES ($1, $2, $3, $4, $5, $6)`,
    },
    // Oldest first, a batch at a time; rows another purge is deleting are skipped, not waited for.
    purge: {
      name: `${table}_purge`,
      text: `WITH expired AS (
               SELECT ${owner}, key FROM ${table}
               WHERE created_at < now() - make_interval(hours => $1)
               ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED
             ), purged AS (
               DELETE FROM ${table} USING expired
               WHERE ${table}.${owner} = expired.${owner} AND ${table}.key = expired.key
               RETURNING 1
             )
             SELECT count(*)::int FROM purged`,
      rowMode: 'array',
    },
  } as const;
}

const PURGE_BATCH = 500;

export function createIdempotencyKeysRepository(db: Database, scope: IdempotencyScope) {
  const statements = statementsFor(scope);

  async function find({ ownerId, key, requestHash }: IdempotencyClaim, target: Queryable = db) {
    const [row] = await target.query<StoredRow>(statements.find, [ownerId, key]);
    if (!row) return undefined;
    const [storedHash, status, location, body] = row;
    if (storedHash !== requestHash) return { kind: 'mismatch' } as const;
    const response: StoredResponse = { status, body: JSON.parse(body) };
    if (location !== null) response.location = location;
    return { kind: 'replay', response } as const;
  }

  return {
    /**
     * Runs `work` once per key: a retry gets the stored response, a different request under the
     * key a mismatch, and a request while another with the key runs `in-use`. The work's writes
     * and its response commit together, so a failure stores nothing and the client may retry.
     */
    async once(claim: IdempotencyClaim, work: (tx: Transaction) => Promise<StoredResponse>): Promise<IdempotentOutcome> {
      // Retries mostly come after the first attempt ended: one read answers them, with no lock.
      const earlier = await find(claim);
      if (earlier) return earlier;
      return db.transaction(async (tx) => {
        const [[locked] = []] = await tx.query<[boolean]>(statements.lock, [claim.ownerId, claim.key]);
        if (!locked) return { kind: 'in-use' };
        // Read after the lock is held, so a first attempt that committed meanwhile is seen.
        const committed = await find(claim, tx);
        if (committed) return committed;
        const response = await work(tx);
        await tx.query(statements.insert, [
          claim.ownerId,
          claim.key,
          claim.requestHash,
          response.status,
          response.location ?? null,
          JSON.stringify(response.body),
        ]);
        return { kind: 'first', response };
      });
    },

    /** Deletes keys older than the retention, a batch per statement, so no purge holds rows long. */
    async purge(retentionHours: number): Promise<number> {
      let purged = 0;
      for (;;) {
        const [[count = 0] = []] = await db.query<[number]>(statements.purge, [retentionHours, PURGE_BATCH]);
        purged += count;
        if (count < PURGE_BATCH) return purged;
      }
    },
  };
}

export type IdempotencyKeysRepository = ReturnType<typeof createIdempotencyKeysRepository>;
