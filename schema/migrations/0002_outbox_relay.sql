-- Outbox relay support: commit-ordered sequence per ordering key, the
-- NOTIFY that wakes relays, and the indexes the relay's queries use.
-- See docs/OUTBOX.md for the ordering argument.

-- key_seq orders the rows of one ordering key in COMMIT order. The identity
-- id is drawn when a row is inserted, so two concurrent transactions can
-- commit in the opposite order of their ids; key_seq is drawn while holding
-- a per-key advisory lock that is kept until the writing transaction ends,
-- so for one key a later key_seq always belongs to a later commit.
-- NULL for rows without an ordering key.
ALTER TABLE hookbridge.outbox ADD COLUMN key_seq bigint;

CREATE SEQUENCE hookbridge.outbox_key_seq AS bigint;

-- An empty key means "no key", as Enqueue already writes it.
UPDATE hookbridge.outbox SET ordering_key = NULL WHERE ordering_key = '';
-- Rows written before this migration keep their id order.
UPDATE hookbridge.outbox SET key_seq = id WHERE ordering_key IS NOT NULL;
SELECT setval('hookbridge.outbox_key_seq',
              COALESCE((SELECT max(id) FROM hookbridge.outbox), 0) + 1, false);

-- Writers of one ordering key serialise from their outbox insert to their
-- commit (or rollback). The lock is transaction-scoped and lives in its own
-- namespace (first argument), separate from any lock the relay takes; hash
-- collisions between keys only serialise a little more, never less.
CREATE FUNCTION hookbridge.outbox_assign_key_seq() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.ordering_key = '' THEN
        NEW.ordering_key := NULL;
        NEW.key_seq := NULL;
        RETURN NEW;
    END IF;
    PERFORM pg_advisory_xact_lock(1751281664, hashtext(NEW.ordering_key));
    NEW.key_seq := nextval('hookbridge.outbox_key_seq');
    RETURN NEW;
END
$$;

CREATE TRIGGER outbox_assign_key_seq
    BEFORE INSERT ON hookbridge.outbox
    FOR EACH ROW WHEN (NEW.ordering_key IS NOT NULL)
    EXECUTE FUNCTION hookbridge.outbox_assign_key_seq();

-- Wake relays within milliseconds of a commit. Notifications are delivered
-- at commit (never for a rolled-back insert) and identical ones within a
-- transaction are folded into one, so one statement-level notify per
-- INSERT statement is enough. Relays keep a slow poll as a safety net for
-- notifications missed while their listening connection was down.
CREATE FUNCTION hookbridge.outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('hookbridge_outbox', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER outbox_notify
    AFTER INSERT ON hookbridge.outbox
    FOR EACH STATEMENT
    EXECUTE FUNCTION hookbridge.outbox_notify();

-- The claim takes due pending rows in (next_attempt_at, id) order with
-- LIMIT ... FOR UPDATE SKIP LOCKED; 0001's outbox_pending_idx
-- (next_attempt_at, id) WHERE status = 'pending' serves it as an ordered
-- scan that stops after the batch. For keyed rows the relay then reads the
-- first pending rows of each claimed key in key_seq order, to publish a key
-- only from its oldest pending row on: this index answers that per key with
-- a short ordered range scan and holds pending rows only.
CREATE INDEX outbox_pending_key_idx ON hookbridge.outbox (ordering_key, key_seq)
    WHERE status = 'pending' AND ordering_key IS NOT NULL;

-- Retention deletes sent rows older than a cutoff in batches of bounded
-- size, oldest first; without this index every batch would scan the table.
-- OutboxStats counts sent rows with it too.
CREATE INDEX outbox_sent_at_idx ON hookbridge.outbox (sent_at) WHERE status = 'sent';

-- Dead rows are few and operators look for them (OutboxStats, requeueing);
-- a tiny partial index keeps that from scanning the table.
CREATE INDEX outbox_dead_idx ON hookbridge.outbox (id) WHERE status = 'dead';
