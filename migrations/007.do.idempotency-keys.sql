-- Responses of POST /v1/pets sent with an Idempotency-Key, so that a retry, on any instance and
-- after any restart, gets the first attempt's response instead of a second animal. A row is
-- written in the transaction that creates the pet: a pet exists exactly when its response does.
-- Keys belong to the API key they were sent with; request_hash tells a retry from a different
-- request under the same key.
CREATE TABLE idempotency_keys (
  api_key_id   bigint      NOT NULL REFERENCES api_keys (id) ON DELETE CASCADE,
  key          text        NOT NULL,
  request_hash text        NOT NULL,
  status       smallint    NOT NULL,
  location     text,
  body         text        NOT NULL,
  created_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (api_key_id, key)
);

-- The purge deletes the oldest first, a batch at a time.
CREATE INDEX idempotency_keys_created_at ON idempotency_keys (created_at);
