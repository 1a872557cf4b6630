-- A change of a customer's balance or limits is told as a change of the customer ('customer:<id>'),
-- not of its keys: each instance then looks up again only the keys of that customer it holds.
-- Naming the keys broke down past 100 of them ('*': every instance forgot every key it held).
CREATE OR REPLACE FUNCTION notify_customer_limits_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('api_key_changed', 'customer:' || NEW.id);
  RETURN NULL;
END
$$;

-- A balance gone (removed, or its owner's balance replaced by another) is told on a channel of its
-- own too, with what names it in the limiter's store, so that each instance drops it there:
-- {"id", "customerId" (a customer's), "quotaId" and "keyCustomerId" (a quota's, and its key's customer)}.
CREATE FUNCTION notify_credit_balance_gone(balance credit_balances) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('credit_balance_gone', json_build_object(
    'id', balance.id,
    'customerId', balance.customer_id,
    'quotaId', balance.quota_id,
    'keyCustomerId', (SELECT customer_id FROM api_keys WHERE id = balance.quota_id))::text);
END
$$;

CREATE OR REPLACE FUNCTION notify_credit_balance_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  balance credit_balances;
  changed bigint[];
BEGIN
  balance := CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
  IF TG_OP = 'DELETE' THEN PERFORM notify_credit_balance_gone(OLD); END IF;
  IF balance.customer_id IS NOT NULL THEN
    PERFORM pg_notify('api_key_changed', 'customer:' || balance.customer_id);
    RETURN NULL;
  END IF;
  -- A quota's keys: the key and those rotated from it, a handful.
  SELECT array_agg(id) INTO changed FROM api_keys
   WHERE revoked_at IS NULL AND (quota_id = balance.quota_id OR id = balance.quota_id);
  IF changed IS NOT NULL THEN
    PERFORM pg_notify('api_key_changed', array_to_string(changed, ','));
  END IF;
  RETURN NULL;
END
$$;

-- The last usable key of a quota revoked: its balance can never be spent again, so it is dropped
-- from the limiter's store (the record stays, for the admin API and the audit).
CREATE FUNCTION notify_quota_revoked() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  balance credit_balances;
BEGIN
  IF EXISTS (SELECT 1 FROM api_keys WHERE coalesce(quota_id, id) = coalesce(NEW.quota_id, NEW.id) AND revoked_at IS NULL) THEN
    RETURN NULL;
  END IF;
  SELECT * INTO balance FROM credit_balances WHERE quota_id = coalesce(NEW.quota_id, NEW.id);
  IF FOUND THEN PERFORM notify_credit_balance_gone(balance); END IF;
  RETURN NULL;
END
$$;

CREATE TRIGGER api_keys_quota_revoked AFTER UPDATE OF revoked_at ON api_keys
  FOR EACH ROW WHEN (OLD.revoked_at IS NULL AND NEW.revoked_at IS NOT NULL)
  EXECUTE FUNCTION notify_quota_revoked();
