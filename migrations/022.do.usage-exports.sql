-- Usage exported as `usage.hourly` events (USAGE_EXPORT=hourly, docs/admin-api.md "Usage events").
-- A row of usage_hours is exported once the export has summed it into its customer's (or key's)
-- hour; every write into it marks it again, so a late write (an instance cut off, catching up)
-- is summed again and sent as a revision. Rows written before this migration count as exported:
-- the export starts with the hours after it is turned on.
ALTER TABLE usage_hours ADD COLUMN exported boolean NOT NULL DEFAULT true;
ALTER TABLE usage_hours ALTER COLUMN exported SET DEFAULT false;
CREATE INDEX usage_hours_unexported ON usage_hours (hour) WHERE NOT exported;

-- What was last sent for each customer (or key without one), operation and hour: its revision
-- and totals. A re-send whose totals changed takes the next revision; unchanged totals keep theirs.
CREATE TABLE usage_exports (
  hour                 timestamptz NOT NULL,
  -- 'customer:<id>' or 'key:<id>': whose usage the event sums.
  subject              text NOT NULL,
  operation            text NOT NULL,
  customer_id          bigint REFERENCES customers (id),
  key_id               bigint REFERENCES api_keys (id),
  revision             integer NOT NULL,
  requests             bigint NOT NULL,
  units                bigint NOT NULL,
  refused_rate_limited bigint NOT NULL,
  refused_concurrency  bigint NOT NULL,
  refused_credits      bigint NOT NULL,
  refused_banned       bigint NOT NULL,
  PRIMARY KEY (hour, subject, operation)
);

-- The first hour the export sends by itself (set by the first instance exporting); hours before it
-- are sent only by a backfill (POST /admin/v1/usage/exports), so turning the export on does not
-- send the whole record.
CREATE TABLE usage_export_start (
  only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
  since    timestamptz NOT NULL
);

-- A usage.hourly event keeps its id across revisions and re-sends (a receiver keeps the newest),
-- so an event id may now be in several deliveries.
ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_event_id_key;
