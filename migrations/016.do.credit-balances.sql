-- Prepaid credits: a balance of units on a customer (shared by all its keys) or on a key's quota
-- (kept by rotation, as the key's windows are). The live balance is decided in the limiter's store;
-- this row is its record: remaining = base - spent.
--   base:    the balance this version started with, moved by increments and decrements;
--   spent:   the units the instances recorded spending in this version (added in batches);
--   version: a new one on every set and every refill, when spending starts again from 0; spending
--            recorded for another version is dropped, as the set or refill replaced it.
CREATE TABLE credit_balances (
  id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  customer_id       bigint UNIQUE REFERENCES customers (id),
  quota_id          bigint UNIQUE REFERENCES api_keys (id),
  base              bigint NOT NULL CHECK (base >= 0),
  spent             bigint NOT NULL DEFAULT 0 CHECK (spent >= 0),
  version           integer NOT NULL DEFAULT 1,
  refill_interval   text CHECK (refill_interval IN ('day', 'month')),
  refill_amount     bigint CHECK (refill_amount >= 0),
  refill_day        smallint CHECK (refill_day BETWEEN 1 AND 31),
  -- When the next refill is due (00:00 UTC of its day); NULL without a refill.
  next_refill_at    timestamptz,
  -- The version whose balance ran out and was told (credits.exhausted): once per version.
  exhausted_version integer,
  created_at        timestamptz NOT NULL DEFAULT now(),
  updated_at        timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT credit_balances_one_owner CHECK ((customer_id IS NULL) <> (quota_id IS NULL)),
  CONSTRAINT credit_balances_refill_whole CHECK (
    (refill_interval IS NULL) = (refill_amount IS NULL) AND (refill_interval IS NULL) = (next_refill_at IS NULL)),
  CONSTRAINT credit_balances_day_of_month CHECK (refill_day IS NULL OR refill_interval = 'month')
);
CREATE INDEX credit_balances_due ON credit_balances (next_refill_at) WHERE next_refill_at IS NOT NULL;

-- Each instance reads a key's balances with the key (its own quota's, its customer's): a balance
-- made, removed, set, moved or refilled is told as a change of the keys it binds, on the keys'
-- channel, as a customer's limits are (migrations/015). Spending alone (spent) tells nothing.
CREATE FUNCTION notify_credit_balance_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  balance credit_balances;
  changed bigint[];
BEGIN
  balance := CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
  SELECT array_agg(id) INTO changed FROM (
    SELECT id FROM api_keys
     WHERE revoked_at IS NULL
       AND (customer_id = balance.customer_id OR quota_id = balance.quota_id OR id = balance.quota_id)
     LIMIT 101
  ) AS first_keys;
  IF changed IS NOT NULL THEN
    PERFORM pg_notify('api_key_changed', CASE WHEN cardinality(changed) > 100 THEN '*' ELSE array_to_string(changed, ',') END);
  END IF;
  RETURN NULL;
END
$$;

CREATE TRIGGER credit_balances_made_or_removed AFTER INSERT OR DELETE ON credit_balances
  FOR EACH ROW EXECUTE FUNCTION notify_credit_balance_changed();
CREATE TRIGGER credit_balances_changed AFTER UPDATE OF base, version, refill_interval, refill_amount, refill_day, next_refill_at ON credit_balances
  FOR EACH ROW WHEN (OLD.base IS DISTINCT FROM NEW.base OR OLD.version IS DISTINCT FROM NEW.version
                     OR OLD.next_refill_at IS DISTINCT FROM NEW.next_refill_at OR OLD.refill_amount IS DISTINCT FROM NEW.refill_amount)
  EXECUTE FUNCTION notify_credit_balance_changed();
