import { Type, type Static } from '@sinclair/typebox';
import { Cursor, Nullable, PageLimit, Timestamp } from '../platform/schemas/common.js';

export const AuditEntry = Type.Object(
  {
    id: Type.Integer({ format: 'int64' }),
    at: Timestamp,
    actor: Type.String({
      description:
        'What made the change: admin-api (adminTokenId says which token), cli:keys (the keys command), system:development-key (the development key of an embedded first start)',
    }),
    adminTokenId: Nullable(
      Type.Integer({ format: 'int64', description: 'The admin token that made the change; null when the admin API did not' }),
    ),
    requestId: Nullable(Type.String({ description: 'The X-Request-Id of the admin request, as logged' })),
    action: Type.String({
      description:
        'key.create, key.update, key.rotate, key.revoke, key.ban_lift, address.ban_lift, webhook_delivery.retry, admin_token.create, admin_token.revoke, customer.create, customer.update, customer.credits (details.customerId says which customer), key.credits (details.quotaId says whose balance), plan.create, plan.update, plan.delete (details.plan says which plan); a credits entry has details {operation, amount, before, after}',
    }),
    keyId: Nullable(Type.Integer({ format: 'int64' })),
    details: Type.Object({}, { additionalProperties: true, description: 'What changed; never a secret' }),
  },
  { title: 'AuditEntry' },
);
export const AuditEntries = Type.Array(AuditEntry, { title: 'AuditEntries', description: 'One page of audit entries, newest first' });

export const AuditQuery = Type.Object({ limit: PageLimit('Entries per page'), cursor: Cursor });
export type AuditQuery = Static<typeof AuditQuery>;
