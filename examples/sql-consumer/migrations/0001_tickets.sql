-- The tables of the tickets consumer (examples/sql-consumer/hookbridge.yaml),
-- applied at start as the migration set "tickets".
CREATE SCHEMA IF NOT EXISTS crm;

CREATE TABLE crm.tickets (
    ticket_id    bigint PRIMARY KEY,
    title        text   NOT NULL,
    state        text   NOT NULL CHECK (state IN ('open', 'closed')),
    opened_event text   NOT NULL
);

CREATE TABLE crm.ticket_log (
    event_id    text        PRIMARY KEY,
    event_type  text        NOT NULL,
    received_at timestamptz NOT NULL,
    body        jsonb       NOT NULL
);
