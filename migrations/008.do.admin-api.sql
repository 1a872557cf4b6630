-- The admin API (ADMIN_PORT). Admin tokens are kept like API keys: only a SHA-256 hash of each,
-- shown once at creation. A read token may look; a write token may also change keys.
CREATE TABLE admin_tokens (
  id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  name       text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 200),
  scope      text NOT NULL CHECK (scope IN ('read', 'write')),
  token_hash bytea NOT NULL UNIQUE CHECK (octet_length(token_hash) = 32),
  created_at timestamptz NOT NULL DEFAULT now(),
  revoked_at timestamptz
);

-- Who changed what, and when: written in the transaction of the change itself. actor_token_id is
-- the admin token of an API request, NULL for the keys command. Never a secret or a hash.
CREATE TABLE admin_audit (
  id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  at             timestamptz NOT NULL DEFAULT now(),
  actor_token_id bigint REFERENCES admin_tokens (id),
  request_id     text,
  action         text NOT NULL,
  key_id         bigint REFERENCES api_keys (id),
  details        jsonb NOT NULL DEFAULT '{}'
);

-- Idempotency-Key of the admin API's creates, per admin token, as idempotency_keys (007) is per API key.
CREATE TABLE admin_idempotency_keys (
  admin_token_id bigint      NOT NULL REFERENCES admin_tokens (id) ON DELETE CASCADE,
  key            text        NOT NULL,
  request_hash   text        NOT NULL,
  status         smallint    NOT NULL,
  location       text,
  body           text        NOT NULL,
  created_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (admin_token_id, key)
);

CREATE INDEX admin_idempotency_keys_created_at ON admin_idempotency_keys (created_at);
-- The admin listing filters by name (a customer's key) and by plan.
CREATE INDEX api_keys_name ON api_keys (name, id);
CREATE INDEX api_keys_plan ON api_keys (plan, id);
