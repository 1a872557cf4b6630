-- Browser keys (issue 57): the web origins a key may be used from, each exactly as browsers send it in
-- Origin (the key rules check them: src/api-keys/origins.ts); NULL: any origin, and requests with none.
-- Per key like its enforcement, so a change reaches the keys of its quota still in their overlap.
ALTER TABLE api_keys
  ADD COLUMN allowed_origins text[] CHECK (allowed_origins IS NULL OR cardinality(allowed_origins) BETWEEN 1 AND 20);
