import { Type, type Static } from '@sinclair/typebox';
import { Cursor, Id, Literals, Nullable, PageLimit, Timestamp } from '../platform/schemas/common.js';
import { DELIVERY_STATES } from './repository.js';

export const DeliveryState = Literals(
  DELIVERY_STATES,
  'pending (to be attempted at nextAttemptAt), delivered (the receiver answered 2xx), failed (failed for 24 hours; retry puts it back)',
);

export const WebhookDelivery = Type.Object(
  {
    id: Type.Integer({ format: 'int64' }),
    eventId: Type.String({
      format: 'uuid',
      description: "The event's id: the same on every attempt (and, for usage.hourly, on every revision of its hour)",
    }),
    type: Type.String({ description: 'usage.threshold, key.banned, credits.refilled, credits.low, credits.exhausted or usage.hourly' }),
    state: DeliveryState,
    attempts: Type.Integer({ description: 'Attempts made so far' }),
    createdAt: Timestamp,
    nextAttemptAt: Nullable({ ...Timestamp, description: 'When a pending delivery is attempted next; null otherwise' }),
    lastAttemptAt: Nullable(Timestamp),
    lastStatus: Nullable(Type.Integer({ description: "The receiver's status at the last attempt; null when it gave none" })),
    lastError: Nullable(Type.String({ description: 'What went wrong at the last attempt: HTTP 500, no answer within 10 s, ...' })),
    deliveredAt: Nullable(Timestamp),
    data: Type.Object(
      {},
      {
        additionalProperties: true,
        description:
          "The event's data, as POSTed: usage.threshold {keyId, quotaId, plan, window, limit, used, threshold, resetAt}; key.banned {keyId, quotaId, bannedUntil}; credits.refilled {owner, balanceId, customerId or quotaId, remaining, refillAt}; credits.low {keyId, quotaId, customerId, owner, balanceId, remaining, refillAt, amount, threshold}; credits.exhausted {keyId, quotaId, customerId, owner, balanceId, remaining, refillAt}; usage.hourly {customerId, externalId, keyId, operation, hour, requests, units, refused, revision}",
      },
    ),
  },
  { title: 'WebhookDelivery', description: 'A usage event and its delivery to WEBHOOK_URL' },
);
export const WebhookDeliveries = Type.Array(WebhookDelivery, {
  title: 'WebhookDeliveries',
  description: 'One page of deliveries, newest first',
});

export const ListDeliveriesQuery = Type.Object({
  state: Type.Optional(DeliveryState),
  limit: PageLimit('Entries per page'),
  cursor: Cursor,
});
export type ListDeliveriesQuery = Static<typeof ListDeliveriesQuery>;

export const DeliveryParams = Type.Object({ id: Type.Integer({ ...Id, description: 'The delivery id' }) });
