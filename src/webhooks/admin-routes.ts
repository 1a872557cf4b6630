import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { errors } from '../platform/errors.js';
import { decodeCursor, encodeCursor, nextLink } from '../platform/pagination.js';
import type { ActorOf, AdminAuditRepository } from '../audit/repository.js';
import type { WebhookDeliveriesRepository } from './repository.js';
import { refuseOtherMethods } from '../platform/http/method-not-allowed.js';
import { DeliveryParams, ListDeliveriesQuery, WebhookDeliveries, WebhookDelivery } from './admin-schemas.js';
import { DEFAULT_PAGE_SIZE } from '../platform/schemas/common.js';
import { ErrorBody } from '../platform/schemas/error.js';

const DELIVERIES_PATH = '/admin/v1/webhook-deliveries';

/** The usage events sent to WEBHOOK_URL, for whoever runs the receiver: what is pending, delivered or failed, and a retry of one not delivered. */
const adminWebhookDeliveries: FastifyPluginAsyncTypebox<{
  deliveries: WebhookDeliveriesRepository;
  audit: AdminAuditRepository;
  /** Who the admin request's retry is recorded as, in the audit trail. */
  actorOf: ActorOf;
}> = async (admin, { deliveries, audit, actorOf }) => {
  admin.get(
    DELIVERIES_PATH,
    {
      schema: {
        operationId: 'listWebhookDeliveries',
        tags: ['webhooks'],
        summary: 'Usage events and their deliveries, newest first, filtered by state',
        querystring: ListDeliveriesQuery,
        response: {
          200: {
            ...WebhookDeliveries,
            headers: { link: { type: 'string', description: 'RFC 8288 rel="next" link, when older deliveries follow' } },
          },
          400: ErrorBody,
        },
      },
    },
    async (request, reply) => {
      const { limit = DEFAULT_PAGE_SIZE, state, cursor } = request.query;
      const beforeId = cursor ? decodeCursor(cursor, state, 'state filter') : Number.MAX_SAFE_INTEGER;
      const page = await deliveries.page({ state, beforeId, limit });
      if (page.nextBeforeId !== undefined) {
        reply.header('link', nextLink(DELIVERIES_PATH, { state, limit, cursor: encodeCursor(page.nextBeforeId, state) }));
      }
      return page.deliveries;
    },
  );

  admin.post(
    `${DELIVERIES_PATH}/:id/retry`,
    {
      schema: {
        operationId: 'retryWebhookDelivery',
        tags: ['webhooks'],
        summary: 'Put a failed or pending delivery back: due now, and retried for 24 hours more',
        params: DeliveryParams,
        response: {
          200: WebhookDelivery,
          400: ErrorBody,
          404: ErrorBody,
          409: { ...ErrorBody, description: 'The delivery was delivered already (`conflict`)' },
        },
      },
      config: { writes: true },
    },
    async (request) => {
      const { id } = request.params;
      const retried = await deliveries.retry(id);
      if (!retried) {
        const delivery = await deliveries.get(id);
        if (!delivery) throw errors.notFound(`No webhook delivery with id ${id}`);
        throw errors.conflict(`Webhook delivery ${id} was delivered; only a failed or pending one is retried`);
      }
      await audit.record(actorOf(request), 'webhook_delivery.retry', null, { deliveryId: id, eventId: retried.eventId });
      return retried;
    },
  );

  refuseOtherMethods(admin, DELIVERIES_PATH, ['GET']);
  refuseOtherMethods(admin, `${DELIVERIES_PATH}/:id/retry`, ['POST']);
};

export default adminWebhookDeliveries;
