import { generateAdminToken, hashKey } from '../api-keys/format.js';
import type { Database } from '../platform/db/database.js';
import { recordAudit, type Actor } from '../audit/repository.js';

/** read: look at keys, their usage and the audit trail (support); write: also change keys (billing). */
export const ADMIN_SCOPES = ['read', 'write'] as const;
export type AdminScope = (typeof ADMIN_SCOPES)[number];

export const isAdminScope = (value: string): value is AdminScope => (ADMIN_SCOPES as readonly string[]).includes(value);

/** What an admin request learns from its token. */
export interface AdminTokenIdentity {
  id: number;
  name: string;
  scope: AdminScope;
}

/** An admin token as listed: never the token, never its hash. */
export interface AdminTokenRecord extends AdminTokenIdentity {
  createdAt: string;
  revokedAt: string | null;
}

interface AdminTokenRow {
  id: number;
  name: string;
  scope: AdminScope;
  created_at: Date;
  revoked_at: Date | null;
}

const statements = {
  insert: {
    name: 'admin_tokens_insert',
    text: 'INSERT INTO admin_tokens (name, scope, token_hash) VALUES ($1, $2, $3) RETURNING id',
  },
  list: { name: 'admin_tokens_list', text: 'SELECT id, name, scope, created_at, revoked_at FROM admin_tokens ORDER BY id' },
  revoke: {
    name: 'admin_tokens_revoke',
    text: 'UPDATE admin_tokens SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1 RETURNING id',
  },
  findUsable: {
    name: 'admin_tokens_find_usable',
    text: 'SELECT id, name, scope FROM admin_tokens WHERE token_hash = $1 AND revoked_at IS NULL',
  },
} as const;

export function createAdminTokensRepository(db: Database) {
  return {
    /** Creates a token and returns it: the only time it exists outside its holder's hands. */
    create(token: { name: string; scope: AdminScope }, actor: Actor): Promise<{ id: number; token: string }> {
      const secret = generateAdminToken();
      return db.transaction(async (tx) => {
        const [row] = await tx.query<{ id: number }>(statements.insert, [token.name, token.scope, hashKey(secret)]);
        await recordAudit(tx, actor, 'admin_token.create', null, { adminTokenId: row!.id, name: token.name, scope: token.scope });
        return { id: row!.id, token: secret };
      });
    },

    async list(): Promise<AdminTokenRecord[]> {
      const rows = await db.query<AdminTokenRow>(statements.list);
      return rows.map((row) => ({
        id: row.id,
        name: row.name,
        scope: row.scope,
        createdAt: new Date(row.created_at).toISOString(),
        revokedAt: row.revoked_at && new Date(row.revoked_at).toISOString(),
      }));
    },

    /** Revokes a token, at once on every instance (each admin request looks its token up); false when there is no such id. */
    revoke(id: number, actor: Actor): Promise<boolean> {
      return db.transaction(async (tx) => {
        const found = (await tx.query(statements.revoke, [id])).length > 0;
        if (found) await recordAudit(tx, actor, 'admin_token.revoke', null, { adminTokenId: id });
        return found;
      });
    },

    /** The token with this hash, unless it is revoked. */
    async findUsable(hash: Buffer): Promise<AdminTokenIdentity | undefined> {
      const [row] = await db.query<AdminTokenIdentity>(statements.findUsable, [hash]);
      return row;
    },
  };
}

export type AdminTokensRepository = ReturnType<typeof createAdminTokensRepository>;
