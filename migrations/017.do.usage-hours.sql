-- The usage record (docs/admin-api.md, "Usage"): what the requests of each key did, per hour (UTC)
-- and operation. Each instance adds its counts in batches (an upsert that adds), so that instances
-- add up. customer_id is the key's, copied so that a customer's usage is read without a join: a
-- key's customer never changes. operation '' holds the requests that matched no operation (an
-- unknown path under /v1), which the limiter counts as any other.
CREATE TABLE usage_hours (
  hour                 timestamptz NOT NULL,
  key_id               bigint NOT NULL REFERENCES api_keys (id),
  customer_id          bigint REFERENCES customers (id),
  operation            text NOT NULL,
  requests             bigint NOT NULL DEFAULT 0,
  units                bigint NOT NULL DEFAULT 0,
  refused_rate_limited bigint NOT NULL DEFAULT 0,
  refused_concurrency  bigint NOT NULL DEFAULT 0,
  refused_credits      bigint NOT NULL DEFAULT 0,
  refused_banned       bigint NOT NULL DEFAULT 0,
  -- Its lead column also serves the prune, oldest hours first.
  PRIMARY KEY (hour, key_id, operation)
);
CREATE INDEX usage_hours_customer ON usage_hours (customer_id, hour) WHERE customer_id IS NOT NULL;
CREATE INDEX usage_hours_key ON usage_hours (key_id, hour);
