-- Less WAL per outgoing event: the messages a consumer's transaction
-- enqueues for the events it claimed go into one row, a pack, instead of
-- one row each, and a sent pack is marked with an update that rewrites
-- only its last columns. See docs/OUTBOX.md ("Packs") for the figures and
-- the argument; in short, a row per message cost about 1.4 KB of WAL per
-- event (the row, four index entries, a second full version when marked
-- sent, and the claim's lock), most of it per-row overhead that a pack
-- pays once for all its messages.
--
-- The single-message table keeps every row and index under a new name,
-- and "hookbridge.outbox" becomes a view of both tables with the old
-- columns, one row per message, with triggers that write through it as
-- the table was written. Readers of the old table (operators' SQL,
-- dashboards, a binary of the previous version during a rolling upgrade)
-- see every message as before.

ALTER TABLE hookbridge.outbox RENAME TO outbox_rows;

-- Ids and key_seq values are drawn in steps of 1024: a single row takes
-- one value, a pack of up to 1024 messages takes one and gives its
-- messages that value and the ones after it. Messages of a pack therefore
-- have ids and key_seqs of their own, in the pack's order, that no other
-- row or pack can take.
ALTER TABLE hookbridge.outbox_rows ALTER COLUMN id SET INCREMENT BY 1024;
ALTER SEQUENCE hookbridge.outbox_key_seq INCREMENT BY 1024;

-- A row given a key_seq keeps it: messages moved out of a pack (a failed
-- publish, a change through the view) keep their place in their key's
-- commit order. The store is the only writer that sets one.
CREATE OR REPLACE FUNCTION hookbridge.outbox_assign_key_seq() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.ordering_key = '' THEN
        NEW.ordering_key := NULL;
        NEW.key_seq := NULL;
        RETURN NEW;
    END IF;
    IF NEW.key_seq IS NOT NULL THEN
        RETURN NEW;
    END IF;
    PERFORM pg_advisory_xact_lock(1751281664, hashtext(NEW.ordering_key));
    NEW.key_seq := nextval('hookbridge.outbox_key_seq');
    RETURN NEW;
END
$$;

-- One pack per enqueue call of a transaction that applies events: the
-- message i (from 1) has id first_id + i - 1, and, when it has an ordering
-- key, key_seq key_seq + i - 1. The arrays are parallel; keys and headers
-- are NULL when no message has one. A pack is pending until the relay
-- publishes all of it; anything else (a failed publish, a message left
-- behind its key) moves its unpublished messages to outbox_rows, where
-- they are retried, deferred or die one by one.
--
-- sent_at and stream_seqs come last and change once: marking a pack sent
-- writes only them to the WAL when the new version fits on the page,
-- hence the fill factor.
CREATE TABLE hookbridge.outbox_packs (
    first_id    bigint      NOT NULL,
    key_seq     bigint      NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    n           integer     NOT NULL CHECK (n BETWEEN 1 AND 1024),
    event_ids   text[]      NOT NULL,
    subjects    text[]      NOT NULL,
    keys        text[],
    headers     text[],
    payloads    bytea[]     NOT NULL,
    sent_at     timestamptz,
    stream_seqs bigint[]
) WITH (fillfactor = 50,
        autovacuum_vacuum_scale_factor = 0.02,
        autovacuum_vacuum_insert_scale_factor = 0.02,
        autovacuum_analyze_scale_factor = 0.05);

-- A message's pack by id (the block of 1024 ids from first_id), and
-- retention's walk. n is included so that the counts of status and
-- /metrics read the index alone, not every kept pack.
ALTER TABLE hookbridge.outbox_packs ADD CONSTRAINT outbox_packs_pkey PRIMARY KEY (first_id) INCLUDE (n);
-- The relay claims pending packs in key_seq order, and looks for earlier
-- pending packs that share a key with the ones it holds.
CREATE INDEX outbox_packs_pending_idx ON hookbridge.outbox_packs (key_seq) INCLUDE (n) WHERE sent_at IS NULL;
-- A pack's messages are found from the inbox rows of the events whose
-- apply wrote it: inbox.applied_at and the pack's created_at are both the
-- transaction's now().
CREATE INDEX outbox_packs_created_at_idx ON hookbridge.outbox_packs (created_at);

CREATE TRIGGER outbox_packs_notify
    AFTER INSERT ON hookbridge.outbox_packs
    FOR EACH STATEMENT
    EXECUTE FUNCTION hookbridge.outbox_notify();

-- Every message, in one shape: what the outbox table was.
CREATE VIEW hookbridge.outbox AS
SELECT r.id, r.event_id, r.subject, r.headers, r.payload, r.ordering_key, r.status, r.attempts,
       r.last_error, r.created_at, r.next_attempt_at, r.sent_at, r.stream_seq, r.key_seq
FROM hookbridge.outbox_rows r
UNION ALL
SELECT p.first_id + m.ord - 1, m.event_id, m.subject, m.header::jsonb, m.payload, m.key,
       CASE WHEN p.sent_at IS NULL THEN 'pending' ELSE 'sent' END, 0,
       NULL::text, p.created_at, p.created_at, p.sent_at, p.stream_seqs[m.ord],
       CASE WHEN m.key IS NOT NULL THEN p.key_seq + m.ord - 1 END
FROM hookbridge.outbox_packs p
CROSS JOIN LATERAL unnest(p.event_ids, p.subjects, p.keys, p.headers, p.payloads)
     WITH ORDINALITY AS m(event_id, subject, key, header, payload, ord);

ALTER VIEW hookbridge.outbox ALTER COLUMN id SET DEFAULT nextval('hookbridge.outbox_id_seq');
ALTER VIEW hookbridge.outbox ALTER COLUMN status SET DEFAULT 'pending';
ALTER VIEW hookbridge.outbox ALTER COLUMN attempts SET DEFAULT 0;
ALTER VIEW hookbridge.outbox ALTER COLUMN created_at SET DEFAULT now();
ALTER VIEW hookbridge.outbox ALTER COLUMN next_attempt_at SET DEFAULT now();

-- outbox_unpack moves the messages of the pack holding message id into
-- outbox_rows as they are (pending, or sent with their sequence) and
-- deletes the pack; it does nothing when id is not a pack's. A pack holds
-- the block of 1024 ids from its first_id, which no other row or pack
-- shares.
CREATE FUNCTION hookbridge.outbox_unpack(id bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    p hookbridge.outbox_packs;
BEGIN
    DELETE FROM hookbridge.outbox_packs x
    WHERE x.first_id > outbox_unpack.id - 1024 AND x.first_id <= outbox_unpack.id
    RETURNING x.* INTO p;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    INSERT INTO hookbridge.outbox_rows (id, event_id, subject, headers, payload, ordering_key, key_seq,
                                        status, created_at, next_attempt_at, sent_at, stream_seq)
    OVERRIDING SYSTEM VALUE
    SELECT p.first_id + m.ord - 1, m.event_id, m.subject, m.header::jsonb, m.payload, m.key,
           CASE WHEN m.key IS NOT NULL THEN p.key_seq + m.ord - 1 END,
           CASE WHEN p.sent_at IS NULL THEN 'pending' ELSE 'sent' END,
           p.created_at, p.created_at, p.sent_at, p.stream_seqs[m.ord]
    FROM unnest(p.event_ids, p.subjects, p.keys, p.headers, p.payloads)
         WITH ORDINALITY AS m(event_id, subject, key, header, payload, ord);
END
$$;

-- Writes through the view go to outbox_rows; a message of a pack is
-- first moved there with the rest of its pack. An insert whose event id
-- is taken inserts nothing (the old table's writers used ON CONFLICT DO
-- NOTHING, and read the stored row when nothing was inserted).
CREATE FUNCTION hookbridge.outbox_view_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO hookbridge.outbox_rows AS o (id, event_id, subject, headers, payload, ordering_key, status, attempts,
                                             last_error, created_at, next_attempt_at, sent_at, stream_seq, key_seq)
    OVERRIDING SYSTEM VALUE
    VALUES (NEW.id, NEW.event_id, NEW.subject, NEW.headers, NEW.payload, NEW.ordering_key, NEW.status, NEW.attempts,
            NEW.last_error, NEW.created_at, NEW.next_attempt_at, NEW.sent_at, NEW.stream_seq, NEW.key_seq)
    ON CONFLICT DO NOTHING
    RETURNING o.* INTO NEW;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END
$$;

CREATE FUNCTION hookbridge.outbox_view_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM hookbridge.outbox_unpack(OLD.id);
    UPDATE hookbridge.outbox_rows AS o
    SET event_id = NEW.event_id, subject = NEW.subject, headers = NEW.headers, payload = NEW.payload,
        ordering_key = NEW.ordering_key, status = NEW.status, attempts = NEW.attempts, last_error = NEW.last_error,
        created_at = NEW.created_at, next_attempt_at = NEW.next_attempt_at, sent_at = NEW.sent_at,
        stream_seq = NEW.stream_seq, key_seq = NEW.key_seq
    WHERE o.id = OLD.id
    RETURNING o.* INTO NEW;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END
$$;

CREATE FUNCTION hookbridge.outbox_view_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM hookbridge.outbox_unpack(OLD.id);
    DELETE FROM hookbridge.outbox_rows AS o WHERE o.id = OLD.id;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    RETURN OLD;
END
$$;

CREATE TRIGGER outbox_view_insert INSTEAD OF INSERT ON hookbridge.outbox
    FOR EACH ROW EXECUTE FUNCTION hookbridge.outbox_view_insert();
CREATE TRIGGER outbox_view_update INSTEAD OF UPDATE ON hookbridge.outbox
    FOR EACH ROW EXECUTE FUNCTION hookbridge.outbox_view_update();
CREATE TRIGGER outbox_view_delete INSTEAD OF DELETE ON hookbridge.outbox
    FOR EACH ROW EXECUTE FUNCTION hookbridge.outbox_view_delete();

-- outbox_owned reports whether every id is the derived id
-- "<consumer>:<source>:<event id>" (publisher.DerivedID) of an inbox row
-- that the current transaction inserted. Then no other message can have
-- the id: the inbox key is claimed once, and the transaction that claimed
-- it is this one. Rows inserted in a subtransaction do not count (their
-- xmin is the subtransaction's); those messages are written one row each.
CREATE FUNCTION hookbridge.outbox_owned(ids text[]) RETURNS boolean
LANGUAGE sql AS $$
    SELECT count(*) = cardinality(ids)
    FROM unnest(ids) AS x(id)
    CROSS JOIN LATERAL (
        SELECT 1 FROM hookbridge.inbox i
        WHERE i.consumer = split_part(x.id, ':', 1)
          AND i.source = split_part(x.id, ':', 2)
          AND i.event_id = substr(x.id, length(split_part(x.id, ':', 1)) + length(split_part(x.id, ':', 2)) + 3)
          AND i.xmin = pg_current_xact_id()::xid
        LIMIT 1) AS i
$$;

-- outbox_packed returns the messages of packs whose event id is one of
-- ids. Packs are found from the inbox rows the ids are derived from (a
-- pack's created_at is the applying transaction's now(), as the inbox
-- row's applied_at), one primary-key probe per id: messages of other ids
-- are never in a pack.
CREATE FUNCTION hookbridge.outbox_packed(ids text[])
RETURNS TABLE (id bigint, event_id text, subject text, payload bytea, status text, stream_seq bigint)
LANGUAGE sql STABLE AS $$
    SELECT p.first_id + m.ord - 1, m.event_id, m.subject, m.payload,
           CASE WHEN p.sent_at IS NULL THEN 'pending' ELSE 'sent' END, p.stream_seqs[m.ord]
    FROM (SELECT DISTINCT a.applied_at
          FROM unnest(ids) AS x(id)
          CROSS JOIN LATERAL (
              SELECT i.applied_at FROM hookbridge.inbox i
              WHERE i.consumer = split_part(x.id, ':', 1)
                AND i.source = split_part(x.id, ':', 2)
                AND i.event_id = substr(x.id, length(split_part(x.id, ':', 1)) + length(split_part(x.id, ':', 2)) + 3)
              LIMIT 1) AS a) AS t
    JOIN hookbridge.outbox_packs p ON p.created_at = t.applied_at AND p.event_ids && ids
    CROSS JOIN LATERAL unnest(p.event_ids, p.subjects, p.payloads) WITH ORDINALITY AS m(event_id, subject, payload, ord)
    WHERE m.event_id = ANY (ids)
$$;

-- outbox_write is Enqueue's one statement for n messages given as
-- parallel arrays (keys and headers NULL when none has one). When the
-- transaction owns every id (outbox_owned) and none is in the outbox yet,
-- it writes one pack, after taking the ordering keys' locks in the order
-- the keys first appear, as the row trigger takes them, and returns every
-- id. Otherwise it inserts one row per message, in order, skipping ids
-- already present (in outbox_rows or in a pack), and returns the ids it
-- inserted; the caller compares the others.
CREATE FUNCTION hookbridge.outbox_write(ids text[], subjects text[], headers text[], payloads bytea[], keys text[])
RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    n      integer := cardinality(ids);
    owned  integer := 0;
    packed text[];
BEGIN
    -- outbox_owned's query, here rather than called: a plan plpgsql keeps.
    IF n BETWEEN 1 AND 1024 THEN
        SELECT count(*) INTO owned
        FROM unnest(ids) AS x(id)
        CROSS JOIN LATERAL (
            SELECT 1 FROM hookbridge.inbox i
            WHERE i.consumer = split_part(x.id, ':', 1)
              AND i.source = split_part(x.id, ':', 2)
              AND i.event_id = substr(x.id, length(split_part(x.id, ':', 1)) + length(split_part(x.id, ':', 2)) + 3)
              AND i.xmin = pg_current_xact_id()::xid
            LIMIT 1) AS i;
    END IF;
    -- Only the transaction that owns an id writes a pack holding it, so
    -- an earlier pack with one of these ids is one of this transaction's:
    -- created at its now().
    IF owned = n AND n > 0
       AND NOT EXISTS (SELECT 1 FROM hookbridge.outbox_rows r WHERE r.event_id = ANY (ids))
       AND NOT EXISTS (SELECT 1 FROM hookbridge.outbox_packs p WHERE p.created_at = now() AND p.event_ids && ids) THEN
        PERFORM pg_advisory_xact_lock(1751281664, hashtext(k.k))
        FROM (SELECT u.k, min(u.ord) AS first
              FROM unnest(keys) WITH ORDINALITY AS u(k, ord)
              WHERE u.k IS NOT NULL
              GROUP BY u.k ORDER BY first) AS k;
        INSERT INTO hookbridge.outbox_packs (first_id, key_seq, n, event_ids, subjects, keys, headers, payloads)
        VALUES (nextval('hookbridge.outbox_id_seq'), nextval('hookbridge.outbox_key_seq'), n,
                ids, subjects, keys, headers, payloads);
        RETURN QUERY SELECT unnest(ids);
        RETURN;
    END IF;
    packed := ARRAY(SELECT p.event_id FROM hookbridge.outbox_packed(ids) AS p);
    RETURN QUERY
    INSERT INTO hookbridge.outbox_rows AS o (event_id, subject, headers, payload, ordering_key)
    SELECT u.event_id, u.subject, u.header::jsonb, u.payload, u.key
    FROM unnest(ids, subjects, headers, payloads, keys) WITH ORDINALITY AS u(event_id, subject, header, payload, key, ord)
    WHERE u.event_id <> ALL (packed)
    ORDER BY u.ord
    ON CONFLICT DO NOTHING
    RETURNING o.event_id;
END
$$;

-- outbox_claim_packs locks pending packs in key_seq order, skipping the
-- ones other relays hold, until they carry budget messages (at least one
-- pack). Rows are fetched, and locked, one at a time, so no pack is
-- locked that is not returned.
CREATE FUNCTION hookbridge.outbox_claim_packs(budget integer) RETURNS SETOF hookbridge.outbox_packs
LANGUAGE plpgsql AS $$
DECLARE
    c CURSOR FOR SELECT * FROM hookbridge.outbox_packs WHERE sent_at IS NULL ORDER BY key_seq FOR UPDATE SKIP LOCKED;
    p hookbridge.outbox_packs;
    total integer := 0;
BEGIN
    OPEN c;
    LOOP
        FETCH c INTO p;
        EXIT WHEN NOT FOUND;
        RETURN NEXT p;
        total := total + p.n;
        EXIT WHEN total >= budget;
    END LOOP;
    CLOSE c;
END
$$;

-- hookbridge.enqueue (0007) with the same checks and answers, writing to
-- outbox_rows and comparing with a packed message of the same id too.
CREATE OR REPLACE FUNCTION hookbridge.enqueue(id text, subject text, payload jsonb, key text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    body           bytea;
    stored_subject text;
    stored_payload bytea;
BEGIN
    IF enqueue.id IS NULL OR enqueue.id !~ '^[!-~]{1,255}$' THEN
        RAISE EXCEPTION 'enqueue: invalid event id %', quote_nullable(enqueue.id)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF enqueue.subject IS NULL OR length(enqueue.subject) > 207
       OR enqueue.subject !~ '^events\.[A-Za-z0-9_-]{1,64}(\.[A-Za-z0-9_-]{1,64})*$' THEN
        RAISE EXCEPTION 'enqueue %: subject % must be events.<token>[.<token>…]', enqueue.id, quote_nullable(enqueue.subject)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF enqueue.payload IS NULL THEN
        RAISE EXCEPTION 'enqueue outbox event %: payload is null', enqueue.id
            USING ERRCODE = 'not_null_violation';
    END IF;
    body := convert_to(enqueue.payload::text, 'UTF8');

    SELECT p.subject, p.payload INTO stored_subject, stored_payload
    FROM hookbridge.outbox_packed(ARRAY[enqueue.id]) AS p;
    IF NOT FOUND THEN
        INSERT INTO hookbridge.outbox_rows (event_id, subject, headers, payload, ordering_key)
        VALUES (enqueue.id, enqueue.subject, NULL, body, NULLIF(enqueue.key, ''))
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            RETURN;
        END IF;
        SELECT o.subject, o.payload INTO stored_subject, stored_payload
        FROM hookbridge.outbox_rows o WHERE o.event_id = enqueue.id;
        IF NOT FOUND THEN
            -- Skipped as a conflict yet invisible to this snapshot: only a
            -- concurrent writer's row under REPEATABLE READ or SERIALIZABLE
            -- (Enqueue's "row not visible"); retrying can help.
            RAISE EXCEPTION 'enqueue outbox event %: read existing: row not visible', enqueue.id;
        END IF;
    END IF;
    IF stored_subject <> enqueue.subject OR stored_payload <> body THEN
        RAISE EXCEPTION 'enqueue outbox event %: outbox event id reused with different content', enqueue.id
            USING ERRCODE = 'unique_violation';
    END IF;
END
$$;
