import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { decodeCursor, encodeCursor, nextLink } from '../platform/pagination.js';
import type { AdminAuditRepository } from './repository.js';
import { refuseOtherMethods } from '../platform/http/method-not-allowed.js';
import { AuditEntries, AuditQuery } from './admin-schemas.js';
import { DEFAULT_PAGE_SIZE } from '../platform/schemas/common.js';
import { ErrorBody } from '../platform/schemas/error.js';

const AUDIT_PATH = '/admin/v1/audit';

/** The audit trail: every change of keys and admin tokens, by the admin API or the keys command, newest first. */
const adminAudit: FastifyPluginAsyncTypebox<{ audit: AdminAuditRepository }> = async (admin, { audit }) => {
  admin.get(
    AUDIT_PATH,
    {
      schema: {
        operationId: 'listAudit',
        tags: ['audit'],
        summary: 'Changes made through the admin API or the keys command, newest first',
        querystring: AuditQuery,
        response: {
          200: {
            ...AuditEntries,
            headers: { link: { type: 'string', description: 'RFC 8288 rel="next" link, when older entries follow' } },
          },
          400: ErrorBody,
        },
      },
    },
    async (request, reply) => {
      const { limit = DEFAULT_PAGE_SIZE, cursor } = request.query;
      const page = await audit.page({ limit, beforeId: cursor ? decodeCursor(cursor, undefined, 'listing') : undefined });
      if (page.nextBeforeId !== undefined)
        reply.header('link', nextLink(AUDIT_PATH, { limit, cursor: encodeCursor(page.nextBeforeId, undefined) }));
      return page.entries;
    },
  );
  refuseOtherMethods(admin, AUDIT_PATH, ['GET']);
};

export default adminAudit;
