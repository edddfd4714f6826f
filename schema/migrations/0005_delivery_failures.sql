-- Failures of one message that count toward max_deliver. JetStream's own
-- delivery count cannot be used: it also counts the redeliveries after
-- serialization failures, deadlocks, lost connections, outages and ack
-- timeouts, none of which is the event's fault. A consumer upserts this row
-- outside the transaction that failed (which rolled back), so the count
-- survives it; the row is deleted in the transaction that applies the
-- event, or together with the dead-letter row. Rows exist only for
-- messages that are failing right now, so the table stays small.
CREATE TABLE hookbridge.delivery_failures (
    consumer   text        NOT NULL,
    source     text        NOT NULL,
    event_id   text        NOT NULL,
    stream_seq bigint      NOT NULL,
    failures   integer     NOT NULL,
    last_error text        NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, source, event_id, stream_seq)
);
