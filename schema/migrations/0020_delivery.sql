-- Outgoing HTTP delivery of EVENTS to configured endpoints
-- (internal/delivery, docs/DELIVERY.md).

-- One row per HTTP attempt of one event to one endpoint, so an event's
-- delivery history can be shown per endpoint. A row never holds a secret
-- or the request body; response_excerpt is at most 4 KiB of the answer
-- (the sender truncates, the CHECK makes sure), and error_class is a short
-- word ("timeout", "connect", "refused_address", "status"), never a
-- message with a URL's credentials in it.
CREATE TABLE hookbridge.delivery_attempts (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint         text        NOT NULL,
    event_id         text        NOT NULL,
    subject          text        NOT NULL,
    stream_seq       bigint      NOT NULL,
    attempt          integer     NOT NULL CHECK (attempt >= 1),
    status_code      integer,    -- NULL: no HTTP answer (timeout, connect error)
    error_class      text        NOT NULL DEFAULT '',
    response_excerpt text        NOT NULL DEFAULT '' CHECK (octet_length(response_excerpt) <= 4096),
    duration_ms      integer     NOT NULL,
    attempted_at     timestamptz NOT NULL DEFAULT now()
);
-- An event's history on one endpoint, newest first.
CREATE INDEX delivery_attempts_event ON hookbridge.delivery_attempts (endpoint, event_id, attempted_at DESC);
-- An endpoint's recent attempts, and retention by age.
CREATE INDEX delivery_attempts_recent ON hookbridge.delivery_attempts (endpoint, attempted_at DESC);
CREATE INDEX delivery_attempts_at ON hookbridge.delivery_attempts (attempted_at);

-- Deliveries that failed every attempt of their endpoint's retry schedule:
-- the error queue per endpoint. The event itself stays in EVENTS (the
-- stream sequence points at it), so a requeue goes through stream
-- redelivery and the body is not copied here.
CREATE TABLE hookbridge.delivery_dead_letters (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint         text        NOT NULL,
    event_id         text        NOT NULL,
    subject          text        NOT NULL,
    stream_seq       bigint      NOT NULL,
    attempts         integer     NOT NULL,
    last_status      integer,
    last_error_class text        NOT NULL DEFAULT '',
    last_excerpt     text        NOT NULL DEFAULT '' CHECK (octet_length(last_excerpt) <= 4096),
    created_at       timestamptz NOT NULL DEFAULT now(),
    resolved_at      timestamptz,
    resolution       text        CHECK (resolution IN ('requeued', 'discarded')),
    CHECK ((resolved_at IS NULL) = (resolution IS NULL))
);
-- One row per (endpoint, stream message): a sender that crashes between
-- the insert and the Term writes the same row again, which refreshes it.
CREATE UNIQUE INDEX delivery_dead_letters_message ON hookbridge.delivery_dead_letters (endpoint, stream_seq);
CREATE INDEX delivery_dead_letters_unresolved ON hookbridge.delivery_dead_letters (endpoint, created_at) WHERE resolved_at IS NULL;
CREATE INDEX delivery_dead_letters_event ON hookbridge.delivery_dead_letters (event_id);
