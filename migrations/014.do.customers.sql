-- The seller's customers, each owning any number of keys (its production, staging and CI keys).
-- external_id is the seller's own id for the customer, bounded as a key's name is.
CREATE TABLE customers (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  external_id text NOT NULL UNIQUE CHECK (char_length(external_id) BETWEEN 1 AND 200),
  name        text NOT NULL DEFAULT '' CHECK (char_length(name) <= 200),
  created_at  timestamptz NOT NULL DEFAULT now(),
  updated_at  timestamptz NOT NULL DEFAULT now()
);

-- A key without a customer (NULL) is alone with its quota, as every key was before.
ALTER TABLE api_keys ADD COLUMN customer_id bigint REFERENCES customers (id);
CREATE INDEX api_keys_customer ON api_keys (customer_id, id);
