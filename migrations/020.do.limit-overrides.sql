-- Overrides on any key and customer (issue 56): a key's limits are a list of named windows
-- ([{name, limit, windowSeconds, algorithm}], shortest first), as a plan's (migrations/019), which
-- replace its plan's; NULL: the key follows its plan. A customer's windows bind all its keys
-- together, beside each key's own. The minute and the day of before become windows so named.
ALTER TABLE api_keys
  ADD COLUMN limits jsonb CHECK (limits IS NULL OR (jsonb_typeof(limits) = 'array' AND jsonb_array_length(limits) BETWEEN 1 AND 5));

ALTER TABLE customers
  ADD COLUMN limits jsonb CHECK (limits IS NULL OR (jsonb_typeof(limits) = 'array' AND jsonb_array_length(limits) BETWEEN 1 AND 5));

-- The windows of a minute and a day of before: fixed, as they were counted.
CREATE FUNCTION pg_temp.minute_and_day(per_minute integer, per_day integer) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
  SELECT jsonb_agg(w ORDER BY (w->>'windowSeconds')::int)
    FROM (SELECT jsonb_build_object('name', 'minute', 'limit', per_minute, 'windowSeconds', 60, 'algorithm', 'fixed') AS w
           WHERE per_minute IS NOT NULL
          UNION ALL
          SELECT jsonb_build_object('name', 'day', 'limit', per_day, 'windowSeconds', 86400, 'algorithm', 'fixed')
           WHERE per_day IS NOT NULL) AS windows
$$;

UPDATE api_keys SET limits = pg_temp.minute_and_day(per_minute, per_day) WHERE per_minute IS NOT NULL OR per_day IS NOT NULL;
UPDATE customers SET limits = pg_temp.minute_and_day(per_minute, per_day) WHERE per_minute IS NOT NULL OR per_day IS NOT NULL;

-- The enterprise checks of migrations/002 (unnamed there: PostgreSQL named them api_keys_check and
-- api_keys_check1) go with the columns; a key of a plan without limits carrying its own is the key rules' check now.
ALTER TABLE api_keys
  DROP CONSTRAINT IF EXISTS api_keys_check,
  DROP CONSTRAINT IF EXISTS api_keys_check1,
  DROP COLUMN per_minute,
  DROP COLUMN per_day;

-- The trigger of migrations/015 (its function replaced in 018) names the old columns: it fires on the windows now.
DROP TRIGGER customers_limits_changed ON customers;

ALTER TABLE customers
  DROP CONSTRAINT customers_concurrency_with_limits,
  DROP CONSTRAINT customers_limits_together,
  DROP COLUMN per_minute,
  DROP COLUMN per_day,
  ADD CONSTRAINT customers_concurrency_with_limits CHECK (concurrency IS NULL OR limits IS NOT NULL);

CREATE TRIGGER customers_limits_changed AFTER UPDATE OF limits, concurrency ON customers
  FOR EACH ROW WHEN (OLD.limits IS DISTINCT FROM NEW.limits OR OLD.concurrency IS DISTINCT FROM NEW.concurrency)
  EXECUTE FUNCTION notify_customer_limits_changed();
