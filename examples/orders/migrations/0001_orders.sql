CREATE SCHEMA IF NOT EXISTS demo;

-- One row per order. version counts applied changes, so a test can prove
-- each event changed the order exactly once.
CREATE TABLE demo.orders (
    order_id         text        PRIMARY KEY,
    status           text        NOT NULL CHECK (status IN ('created', 'paid', 'cancelled')),
    amount_cents     bigint      NOT NULL,
    paid_cents       bigint      NOT NULL DEFAULT 0,
    currency         text        NOT NULL,
    created_event_id text        NOT NULL,
    last_event_id    text        NOT NULL,
    version          integer     NOT NULL DEFAULT 1,
    updated_at       timestamptz NOT NULL DEFAULT now()
);
