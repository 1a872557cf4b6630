-- Delivered and failed deliveries are deleted WEBHOOK_RETENTION_DAYS after their creation, oldest
-- first, a batch at a time, by every instance: found by age among the settled ones, so that a look
-- with nothing to delete reads no more than the index's first entry.
CREATE INDEX webhook_deliveries_settled ON webhook_deliveries (created_at) WHERE state <> 'pending';
