-- The self-test's business table: one row per effect its handler applied.
-- There is deliberately no unique key on the event: the self-test counts
-- rows to prove that one logical operation made one effect, and a unique
-- key would hide a second apply behind an error instead of showing it.
CREATE SCHEMA IF NOT EXISTS hookbridge_selftest;

CREATE TABLE hookbridge_selftest.effects (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id      text        NOT NULL,
    check_name  text        NOT NULL,
    event_id    text        NOT NULL,
    body_sha256 bytea       NOT NULL,
    delivery    integer     NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX effects_run_idx ON hookbridge_selftest.effects (run_id, event_id);
