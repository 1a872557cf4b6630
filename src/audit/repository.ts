import type { FastifyRequest } from 'fastify';
import type { Database, Queryable } from '../platform/db/database.js';

/** Who made a change: what did (the admin API, the keys command, the server itself) and, for the admin API, with which token in which request. */
export interface Actor {
  /** Recorded as `actor`: 'admin-api', 'cli:keys' or 'system:<what>'. */
  name: string;
  adminTokenId: number | null;
  requestId?: string;
}

/** Who a request's changes are recorded as: the listener that authenticated it knows (the admin API: its token and request id). */
export type ActorOf = (request: FastifyRequest) => Actor;

/** How a change is made and recorded: in the caller's transaction (Idempotency-Key), and by whom (the audit trail). */
export interface ChangeOptions {
  tx?: Queryable;
  actor?: Actor;
}

export type AuditAction =
  | 'key.create'
  | 'key.update'
  | 'key.rotate'
  | 'key.revoke'
  | 'key.ban_lift'
  | 'address.ban_lift'
  | 'webhook_delivery.retry'
  | 'admin_token.create'
  | 'admin_token.revoke'
  | 'customer.create'
  | 'customer.update'
  | 'customer.credits'
  | 'key.credits'
  | 'plan.create'
  | 'plan.update'
  | 'plan.delete'
  | 'usage.export';

/** One change as the trail keeps it: never a secret, never a hash. */
export interface AuditEntry {
  id: number;
  at: string;
  actor: string;
  adminTokenId: number | null;
  requestId: string | null;
  action: AuditAction;
  keyId: number | null;
  details: Record<string, unknown>;
}

interface AuditRow {
  id: number;
  at: Date;
  actor: string;
  actor_token_id: number | null;
  request_id: string | null;
  action: AuditAction;
  key_id: number | null;
  details: Record<string, unknown>;
}

const statements = {
  insert: {
    name: 'admin_audit_insert',
    text: `INSERT INTO admin_audit (actor, actor_token_id, request_id, action, key_id, details) VALUES ($1, $2, $3, $4, $5, $6::jsonb)`,
  },
  // Newest first; the cursor is the last id of the previous page.
  page: {
    name: 'admin_audit_page',
    text: `SELECT id, at, actor, actor_token_id, request_id, action, key_id, details FROM admin_audit
           WHERE id < $1 ORDER BY id DESC LIMIT $2`,
  },
} as const;

/** Writes one entry, in the caller's transaction: a change is recorded exactly when it commits. */
export async function recordAudit(
  target: Queryable,
  actor: Actor,
  action: AuditAction,
  keyId: number | null,
  details: Record<string, unknown> = {},
): Promise<void> {
  await target.query(statements.insert, [actor.name, actor.adminTokenId, actor.requestId ?? null, action, keyId, JSON.stringify(details)]);
}

export function createAdminAuditRepository(db: Database) {
  return {
    /** Records a change that is no row of the database's own (a ban lifted in the limiter's store). */
    record: (actor: Actor, action: AuditAction, keyId: number | null, details?: Record<string, unknown>) =>
      recordAudit(db, actor, action, keyId, details),

    /** Up to `limit` entries older than `beforeId`, newest first, and whether more follow. */
    async page({ limit, beforeId }: { limit: number; beforeId?: number }): Promise<{ entries: AuditEntry[]; nextBeforeId?: number }> {
      const rows = await db.query<AuditRow>(statements.page, [beforeId ?? Number.MAX_SAFE_INTEGER, limit + 1]);
      const entries = rows.slice(0, limit).map((row) => ({
        id: row.id,
        at: new Date(row.at).toISOString(),
        actor: row.actor,
        adminTokenId: row.actor_token_id,
        requestId: row.request_id,
        action: row.action,
        keyId: row.key_id,
        details: row.details,
      }));
      return { entries, nextBeforeId: rows.length > limit ? entries.at(-1)!.id : undefined };
    },
  };
}

export type AdminAuditRepository = ReturnType<typeof createAdminAuditRepository>;
