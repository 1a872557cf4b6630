-- API keys: only a SHA-256 hash of each key is kept; the key itself is shown once, at creation.
CREATE TABLE api_keys (
  id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  name       text NOT NULL DEFAULT '' CHECK (char_length(name) <= 200),
  plan       text NOT NULL CHECK (plan IN ('free', 'pro', 'business', 'enterprise')),
  per_minute integer CHECK (per_minute > 0),
  per_day    integer CHECK (per_day > 0),
  key_hash   bytea NOT NULL UNIQUE CHECK (octet_length(key_hash) = 32),
  created_at timestamptz NOT NULL DEFAULT now(),
  revoked_at timestamptz,
  -- Enterprise keys carry their own limits; every other plan takes the plan's.
  CHECK ((plan = 'enterprise') = (per_minute IS NOT NULL AND per_day IS NOT NULL)),
  CHECK (plan = 'enterprise' OR (per_minute IS NULL AND per_day IS NULL))
);

-- Every running instance keeps the active keys in memory and listens here, so a key created or
-- revoked by any means takes effect everywhere at once. The payload is the key id, never the hash.
CREATE FUNCTION notify_api_key_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('api_key_changed', (CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END)::text);
  RETURN NULL;
END
$$;

CREATE TRIGGER api_keys_changed
  AFTER INSERT OR UPDATE OR DELETE ON api_keys
  FOR EACH ROW EXECUTE FUNCTION notify_api_key_changed();
