-- Plans are data (issue 56): an operator changes them through the admin API, without a deploy.
-- limits is the list of named windows ([{name, limit, windowSeconds, algorithm}], shortest first),
-- NULL for a plan whose keys each carry their own (enterprise). The seed's plans are the ones the
-- code held before, so that nothing changes until an operator changes a plan.
CREATE TABLE plans (
  name        text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_-]{0,31}$'),
  limits      jsonb CHECK (limits IS NULL OR (jsonb_typeof(limits) = 'array' AND jsonb_array_length(limits) BETWEEN 1 AND 5)),
  concurrency integer CHECK (concurrency BETWEEN 1 AND 100000),
  shadow      boolean NOT NULL DEFAULT false,
  created_at  timestamptz NOT NULL DEFAULT now(),
  updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Their concurrency is what RATE_LIMIT_CONCURRENCY defaulted to; a deployment that sets it keeps its values (the setting wins).
INSERT INTO plans (name, limits, concurrency) VALUES
  ('free', '[{"name": "minute", "limit": 60, "windowSeconds": 60, "algorithm": "fixed"}, {"name": "day", "limit": 1000, "windowSeconds": 86400, "algorithm": "fixed"}]', 5),
  ('pro', '[{"name": "minute", "limit": 300, "windowSeconds": 60, "algorithm": "fixed"}, {"name": "day", "limit": 10000, "windowSeconds": 86400, "algorithm": "fixed"}]', 20),
  ('business', '[{"name": "minute", "limit": 1000, "windowSeconds": 60, "algorithm": "fixed"}, {"name": "day", "limit": 100000, "windowSeconds": 86400, "algorithm": "fixed"}]', 50),
  ('enterprise', NULL, 100);

-- Every instance holds the plans in memory: a change is told on this channel (its name), so that
-- each reads the plans again, within a second of the change.
CREATE FUNCTION notify_plan_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('plan_changed', CASE WHEN TG_OP = 'DELETE' THEN OLD.name ELSE NEW.name END);
  RETURN NULL;
END
$$;

CREATE TRIGGER plans_changed AFTER INSERT OR UPDATE OR DELETE ON plans
  FOR EACH ROW EXECUTE FUNCTION notify_plan_changed();

-- A key's plan is any plan in the table (checked by the key rules, which lock the plan's row): a
-- plan can be deleted once no working key has it, so revoked keys keep the name of a plan gone.
ALTER TABLE api_keys DROP CONSTRAINT IF EXISTS api_keys_plan_check;
