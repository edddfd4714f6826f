-- Core tables: the inbox that guards every apply, the conflicts it records,
-- and the outbox handlers write to in the same transaction.
CREATE SCHEMA IF NOT EXISTS hookbridge;

-- One row per (consumer, source, event id) ever applied. The primary key is
-- what decides races between two deliveries of the same event: the second
-- INSERT waits for the first transaction and then finds the row.
CREATE TABLE hookbridge.inbox (
    consumer     text        NOT NULL,
    source       text        NOT NULL,
    event_id     text        NOT NULL,
    event_type   text        NOT NULL,
    body_sha256  bytea       NOT NULL,
    stream_seq   bigint      NOT NULL,
    applied_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, source, event_id)
);

-- Same event id, different body: never applied, never dropped. detected_by
-- is 'ingress' (inside the JetStream duplicate window) or the consumer name
-- (after it). The unique key makes recording idempotent under redelivery.
CREATE TABLE hookbridge.conflicts (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    detected_by     text        NOT NULL,
    source          text        NOT NULL,
    event_id        text        NOT NULL,
    event_type      text        NOT NULL DEFAULT '',
    original_sha256 bytea,
    original_seq    bigint,
    rejected_sha256 bytea       NOT NULL,
    rejected_seq    bigint,
    rejected_body   bytea       NOT NULL,
    detected_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (detected_by, source, event_id, rejected_sha256)
);

-- Events written by handlers in the same transaction as their business
-- change; the relay publishes them with Nats-Msg-Id = event_id.
CREATE TABLE hookbridge.outbox (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id        text        NOT NULL UNIQUE,
    subject         text        NOT NULL,
    headers         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    payload         bytea       NOT NULL,
    ordering_key    text,
    status          text        NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'sent', 'dead')),
    attempts        integer     NOT NULL DEFAULT 0,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    sent_at         timestamptz,
    stream_seq      bigint
);

-- The relay's claim query reads pending rows by next_attempt_at; the
-- partial index keeps it from ever scanning sent rows.
CREATE INDEX outbox_pending_idx ON hookbridge.outbox (next_attempt_at, id) WHERE status = 'pending';
