-- A plan or limits change reaches every key of the quota (the rotated keys still in their
-- overlap): found by quota_id. Only rotated keys have one; the others count in their own.
CREATE INDEX api_keys_quota ON api_keys (quota_id) WHERE quota_id IS NOT NULL;
