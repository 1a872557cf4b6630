import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { ActorOf } from '../audit/repository.js';
import type { CustomersRepository } from '../customers/repository.js';
import { errors } from '../platform/errors.js';
import { refuseOtherMethods } from '../platform/http/method-not-allowed.js';
import { ErrorBody } from '../platform/schemas/error.js';
import { DAY_MS, HOUR_MS } from '../platform/time.js';
import { boundOf } from './range.js';
import { UsageExport, UsageExportRequest } from './admin-schemas.js';
import type { createUsageExportRules } from './rules.js';

const EXPORTS_PATH = '/admin/v1/usage/exports';

/** The longest range a backfill sends at once. */
const MAX_EXPORT_DAYS = 31;

export interface AdminUsageExportsOptions {
  /** The backfill of usage.hourly events; undefined when USAGE_EXPORT is off. */
  exports: ReturnType<typeof createUsageExportRules> | undefined;
  customers: CustomersRepository;
  actorOf: ActorOf;
  /** The app's clock: which hour is the current one. */
  now: () => number;
}

/** The backfill (docs/admin-api.md, "Usage events"): hours of the usage record sent again to billing. */
const adminUsageExports: FastifyPluginAsyncTypebox<AdminUsageExportsOptions> = async (admin, { exports, customers, actorOf, now }) => {
  admin.post(
    EXPORTS_PATH,
    {
      schema: {
        operationId: 'exportUsage',
        tags: ['usage'],
        summary: 'Send hours of the usage record again as usage.hourly events (a backfill), each with its stable id',
        description:
          'Queues one event per customer (or key without a customer), operation and hour with usage in the range: at the revision ' +
          'sent last when its totals are unchanged, at the next when they changed. `end` may reach into the current hour: its ' +
          'totals so far are sent, and sent again at a higher revision once it closes. Needs USAGE_EXPORT=hourly.',
        body: UsageExportRequest,
        response: {
          202: UsageExport,
          400: ErrorBody,
          409: { ...ErrorBody, description: 'USAGE_EXPORT is off (`conflict`): no usage.hourly event is sent' },
        },
      },
      config: { writes: true, idempotent: true },
    },
    async (request, reply) => {
      if (!exports) throw errors.conflict('USAGE_EXPORT is off: set USAGE_EXPORT=hourly (with WEBHOOK_URL) to send usage.hourly events');
      const { body } = request;
      const start = boundOf('body/start', body.start, 'hour');
      const end = boundOf('body/end', body.end, 'hour');
      if (start >= end) throw errors.badRequest('body/start must be before end');
      if (end.getTime() - start.getTime() > MAX_EXPORT_DAYS * DAY_MS)
        throw errors.badRequest(`body/end: the range from start to end is more than ${MAX_EXPORT_DAYS} days; send it in parts`);
      if (end.getTime() > Math.ceil((now() + 1) / HOUR_MS) * HOUR_MS)
        throw errors.badRequest('body/end is past the end of the current hour: those hours have no usage yet');
      if (body.customerId !== undefined && !(await customers.get(body.customerId)))
        throw errors.badRequest(`body/customerId names no customer (${body.customerId})`);
      const { status, body: answer } = await admin.idempotently(request, reply, async (tx) => {
        const events = await exports.resend({ start, end, customerId: body.customerId }, { tx, actor: actorOf(request) });
        return { status: 202, body: { start: start.toISOString(), end: end.toISOString(), customerId: body.customerId ?? null, events } };
      });
      return reply.code(status).send(answer);
    },
  );
  refuseOtherMethods(admin, EXPORTS_PATH, ['POST']);
};

export default adminUsageExports;
