-- Messages a consumer gave up on: the last allowed delivery failed
-- (max_deliver), the handler said retrying cannot help (permanent), or the
-- message lacks an identity (unusable). The consumer writes the row before
-- it terminates the message in JetStream, so nothing stops redelivering
-- without a row here. The body is kept for inspection only: replay reads
-- the message back from the HOOKS stream by stream_seq, never from here.
CREATE TABLE hookbridge.dead_letters (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer    text        NOT NULL,
    source      text        NOT NULL DEFAULT '',
    event_id    text        NOT NULL DEFAULT '',
    event_type  text        NOT NULL DEFAULT '',
    subject     text        NOT NULL DEFAULT '',
    stream_seq  bigint      NOT NULL,
    deliveries  integer     NOT NULL,
    reason      text        NOT NULL CHECK (reason IN ('max_deliver', 'permanent', 'unusable')),
    last_error  text        NOT NULL,
    body        bytea       NOT NULL,
    dead_at     timestamptz NOT NULL DEFAULT now(),
    resolved_at timestamptz,
    resolution  text,
    -- A redelivery racing the Term (or a lost Term) records the same
    -- message again: the key keeps one row. Source and event id are part
    -- of it so a recreated stream reusing sequences cannot collide.
    UNIQUE (consumer, source, event_id, stream_seq)
);

-- status and `replay --dead-letters` read the unresolved rows of one
-- consumer; resolved rows pile up and are never scanned for that.
CREATE INDEX dead_letters_unresolved_idx ON hookbridge.dead_letters (consumer, stream_seq) WHERE resolved_at IS NULL;
