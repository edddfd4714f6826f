-- The ledger that hookbridge-bench --mode cluster counts order with: an SQL
-- consumer applies each event of an account (its ordering key) and records
-- the account's version its transaction saw before it. In order, every
-- apply of version v saw v - 1; anything else is an apply out of order, a
-- second row for one (account, version) an apply made twice.
CREATE SCHEMA IF NOT EXISTS ledger;

-- One row per account: the version applied last (0 only inside the
-- transaction of the account's first apply, which sets it).
CREATE TABLE ledger.accounts (
    account text    PRIMARY KEY,
    version integer NOT NULL
);

-- One row per apply, in the order the applies took the account's row lock.
CREATE TABLE ledger.applies (
    seq          bigserial   PRIMARY KEY,
    event_id     text        NOT NULL,
    account      text        NOT NULL,
    version      integer     NOT NULL,
    seen_version integer     NOT NULL,
    applied_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX ON ledger.applies (account, version);

-- An account with a row here fails every apply until the row is deleted:
-- a fault that heals by retry.
CREATE TABLE ledger.blocks (
    account text PRIMARY KEY
);

-- refuse_blocked raises SQLSTATE P0001 for a blocked account: not a data
-- (22) or constraint (23) error, so the event is retried with the
-- consumer's backoff, not dead-lettered at once.
CREATE FUNCTION ledger.refuse_blocked(acct text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM ledger.blocks WHERE account = acct) THEN
        RAISE EXCEPTION 'account % is blocked', acct;
    END IF;
END
$$;
