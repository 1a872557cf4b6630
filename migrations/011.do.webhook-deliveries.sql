-- Usage events for WEBHOOK_URL, one row each (the outbox): written when a key crosses a threshold
-- or is banned, delivered by whichever instance claims the row first, so a restart loses none.
-- dedupe_key makes each event once per quota, window and threshold across all instances; body is
-- the JSON sent, fixed at creation, so every attempt sends the same bytes under a fresh signature.
CREATE TABLE webhook_deliveries (
  id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  event_id        uuid NOT NULL UNIQUE,
  type            text NOT NULL,
  dedupe_key      text NOT NULL UNIQUE,
  body            text NOT NULL,
  state           text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
  attempts        integer NOT NULL DEFAULT 0,
  created_at      timestamptz NOT NULL DEFAULT now(),
  -- When a pending delivery is next due; while an attempt runs, when its claim lapses.
  next_attempt_at timestamptz NOT NULL DEFAULT now(),
  -- Retried until then (24 hours after creation, or after an operator's retry), then left failed.
  retry_until     timestamptz NOT NULL DEFAULT now() + interval '24 hours',
  last_attempt_at timestamptz,
  last_status     integer,
  last_error      text,
  delivered_at    timestamptz
);

CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_by_state ON webhook_deliveries (state, id);
