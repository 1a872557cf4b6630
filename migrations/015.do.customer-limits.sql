-- A customer's limits bind all its keys together: one minute, one day and, if set, one limit of
-- requests in flight across them, beside each key's own. NULL: no shared limits. The minute and
-- the day go together; the bounds are an enterprise key's own limits' (a whole number from 1).
ALTER TABLE customers
  ADD COLUMN per_minute  integer CHECK (per_minute >= 1),
  ADD COLUMN per_day     integer CHECK (per_day >= 1),
  ADD COLUMN concurrency integer CHECK (concurrency BETWEEN 1 AND 100000),
  ADD CONSTRAINT customers_limits_together CHECK ((per_minute IS NULL) = (per_day IS NULL)),
  ADD CONSTRAINT customers_concurrency_with_limits CHECK (concurrency IS NULL OR per_minute IS NOT NULL);

-- Each instance caches the keys it has seen with their customer's limits (read with the key): a
-- change of a customer's limits is told as a change of its keys, on the keys' channel, so that
-- every instance looks them up again as it does a changed key ('*' past 100 keys, as the keys' trigger).
CREATE FUNCTION notify_customer_limits_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  changed bigint[];
BEGIN
  SELECT array_agg(id) INTO changed FROM (
    SELECT id FROM api_keys WHERE customer_id = NEW.id AND revoked_at IS NULL LIMIT 101
  ) AS first_keys;
  IF changed IS NOT NULL THEN
    PERFORM pg_notify('api_key_changed', CASE WHEN cardinality(changed) > 100 THEN '*' ELSE array_to_string(changed, ',') END);
  END IF;
  RETURN NULL;
END
$$;

CREATE TRIGGER customers_limits_changed AFTER UPDATE OF per_minute, per_day, concurrency ON customers
  FOR EACH ROW WHEN (OLD.per_minute IS DISTINCT FROM NEW.per_minute OR OLD.per_day IS DISTINCT FROM NEW.per_day
                     OR OLD.concurrency IS DISTINCT FROM NEW.concurrency)
  EXECUTE FUNCTION notify_customer_limits_changed();
