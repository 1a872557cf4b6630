-- The key lifecycle: an expiry, a read-only scope, and rotation. A rotated key points to the key
-- that replaced it; keys rotated from one another share one rate-limit quota (quota_id, the first
-- key's id; NULL means the key's own), so a rotation does not reset a caller's counts.
ALTER TABLE api_keys
  ADD COLUMN expires_at  timestamptz,
  ADD COLUMN read_only   boolean NOT NULL DEFAULT false,
  ADD COLUMN replaced_by bigint REFERENCES api_keys (id),
  ADD COLUMN quota_id    bigint REFERENCES api_keys (id);

-- Instances no longer hold every key: each caches the keys it has seen and must hear which ones
-- changed. One notice per statement, however many rows it wrote (an import of a million keys is
-- one notice): the changed ids, or '*' when there are more than 100.
DROP TRIGGER IF EXISTS api_keys_changed ON api_keys;
DROP FUNCTION IF EXISTS notify_api_key_changed();

CREATE FUNCTION notify_api_keys_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  changed bigint[];
BEGIN
  IF TG_OP = 'TRUNCATE' THEN
    PERFORM pg_notify('api_key_changed', '*');
    RETURN NULL;
  ELSIF TG_OP = 'DELETE' THEN
    SELECT array_agg(id) INTO changed FROM (SELECT id FROM old_rows LIMIT 101) AS first_rows;
  ELSE
    SELECT array_agg(id) INTO changed FROM (SELECT id FROM new_rows LIMIT 101) AS first_rows;
  END IF;
  IF changed IS NOT NULL THEN
    PERFORM pg_notify('api_key_changed', CASE WHEN cardinality(changed) > 100 THEN '*' ELSE array_to_string(changed, ',') END);
  END IF;
  RETURN NULL;
END
$$;

CREATE TRIGGER api_keys_inserted AFTER INSERT ON api_keys
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION notify_api_keys_changed();
CREATE TRIGGER api_keys_updated AFTER UPDATE ON api_keys
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION notify_api_keys_changed();
CREATE TRIGGER api_keys_deleted AFTER DELETE ON api_keys
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION notify_api_keys_changed();
CREATE TRIGGER api_keys_truncated AFTER TRUNCATE ON api_keys
  FOR EACH STATEMENT EXECUTE FUNCTION notify_api_keys_changed();
