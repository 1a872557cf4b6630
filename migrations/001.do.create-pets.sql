-- Pets: ids are assigned by the database and only ever grow, which is what keyset pagination relies on.
CREATE TABLE pets (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  name        text   NOT NULL CHECK (char_length(name) BETWEEN 1 AND 255),
  category_id bigint NOT NULL CHECK (category_id BETWEEN 1 AND 9007199254740991),
  status      text   CHECK (status IN ('available', 'pending', 'sold')),
  created_at  timestamptz NOT NULL DEFAULT now()
);

-- A status-filtered page is a range scan of this index; the unfiltered one uses the primary key.
CREATE INDEX pets_status_id_idx ON pets (status, id);
