-- Outgoing delivery, the state every instance shares (docs/DELIVERY.md):
-- which instance reads each endpoint and whether the endpoint is enabled;
-- the deliveries JetStream no longer holds (a failing one's attempt count
-- and next attempt, the events parked behind it, requeues and replays);
-- and dead letters a requeue can send without EVENTS.

-- One row per configured endpoint, written by the delivery role when it
-- starts. owner is the instance that reads the endpoint until
-- lease_until: only it pulls the endpoint's durable and only it sends,
-- so the endpoint's rate limit and concurrency hold whatever the number
-- of instances. The writes a sender makes after a failure lock this row
-- (FOR SHARE) and check the lease, so an instance whose lease has run out
-- writes nothing the next owner does not see.
CREATE TABLE hookbridge.delivery_endpoints (
    name             text        PRIMARY KEY,
    state            text        NOT NULL DEFAULT 'enabled' CHECK (state IN ('enabled', 'disabled')),
    -- The first failed attempt with no successful one since (NULL: the
    -- last attempt succeeded, or none was made). An endpoint failing for
    -- its disable_after is disabled.
    failing_since    timestamptz,
    state_changed_at timestamptz NOT NULL DEFAULT now(),
    -- Why it is disabled ("" while enabled): who disabled it and a word
    -- of why; never an answer's text.
    disabled_reason  text        NOT NULL DEFAULT '',
    owner            text,
    lease_until      timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    CHECK ((owner IS NULL) = (lease_until IS NULL))
);

-- The instances running the delivery role, each announcing itself and
-- the endpoints it is configured with every few seconds: every instance
-- spreads each endpoint over the instances seen lately that have it, by
-- the same rule, so each knows its share (a rolling change of the
-- configuration never leaves an endpoint to an instance without it).
CREATE TABLE hookbridge.delivery_instances (
    id         text        PRIMARY KEY,
    host       text        NOT NULL DEFAULT '',
    pid        integer     NOT NULL DEFAULT 0,
    endpoints  text[]      NOT NULL DEFAULT '{}',
    started_at timestamptz NOT NULL DEFAULT now(),
    seen_at    timestamptz NOT NULL DEFAULT now()
);

-- Deliveries Postgres tracks instead of JetStream: written only off the
-- happy path. A delivery whose attempt failed moves here (its attempt
-- count and next attempt) and its message is acked, so a restart or
-- another instance resumes the schedule where it was and JetStream's
-- max ack pending holds only what is in flight. On an ordered endpoint
-- the later events of a failing event's key are parked here too (their
-- next_attempt_at is 'infinity' until the one before them is delivered or
-- dead-lettered), so a failing key holds no memory and never stops the
-- endpoint's other keys. A requeued dead letter and a replay are rows
-- here as well. The body is read again from EVENTS by stream sequence,
-- or from the dead letter for a requeue.
CREATE TABLE hookbridge.delivery_pending (
    endpoint         text        NOT NULL,
    stream_seq       bigint      NOT NULL,
    event_id         text        NOT NULL,
    subject          text        NOT NULL,
    -- The ordering key on an ordered endpoint, '' on an unordered one.
    ordering_key     text        NOT NULL DEFAULT '',
    -- Failed attempts so far; the next one is attempts + 1.
    attempts         integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at  timestamptz NOT NULL,
    origin           text        NOT NULL CHECK (origin IN ('failed', 'parked', 'requeue', 'replay')),
    -- A requeue: the dead letter whose copy of the body is sent.
    dead_letter_id   bigint,
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (endpoint, stream_seq)
);
-- What is due; parked rows ('infinity') are never due.
CREATE INDEX delivery_pending_due ON hookbridge.delivery_pending (endpoint, next_attempt_at);
-- A key's rows in stream order, on ordered endpoints.
CREATE INDEX delivery_pending_key ON hookbridge.delivery_pending (endpoint, ordering_key, stream_seq);

-- A dead letter keeps what a requeue sends: the body and the message
-- headers the request uses, so EVENTS may trim the event. The body is
-- bounded by JetStream's largest message (64 MiB at most).
ALTER TABLE hookbridge.delivery_dead_letters
    ADD COLUMN payload        bytea CHECK (octet_length(payload) <= 67108864),
    ADD COLUMN headers        jsonb,
    -- The ordering key on an ordered endpoint ('' otherwise).
    ADD COLUMN ordering_key   text        NOT NULL DEFAULT '',
    -- When a later event of its key was first sent (ordered endpoints):
    -- a requeue then needs the explicit out-of-order flag.
    ADD COLUMN passed_at      timestamptz,
    -- How many times it was requeued, and when the last requeue's
    -- delivery succeeded.
    ADD COLUMN requeues       integer     NOT NULL DEFAULT 0,
    ADD COLUMN redelivered_at timestamptz;
-- The dead letters a later event of their key may still pass.
CREATE INDEX delivery_dead_letters_unpassed ON hookbridge.delivery_dead_letters (endpoint, ordering_key, stream_seq)
    WHERE passed_at IS NULL AND ordering_key <> '';
