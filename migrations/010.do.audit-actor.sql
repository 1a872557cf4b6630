-- What made a change, named, since not every change without an admin token is the keys
-- command's: 'admin-api' (actor_token_id says which token), 'cli:keys', or
-- 'system:development-key' (the key an embedded first start issues).
ALTER TABLE admin_audit ADD COLUMN actor text;
UPDATE admin_audit SET actor = CASE WHEN actor_token_id IS NULL THEN 'cli:keys' ELSE 'admin-api' END;
ALTER TABLE admin_audit ALTER COLUMN actor SET NOT NULL;
