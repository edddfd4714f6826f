-- Ordering-key locks in one global order. outbox_write (0009) took a
-- pack's per-key advisory locks in the order the keys first appear, and
-- its row path took them row by row in message order. Two transactions
-- whose messages share keys in opposite orders, (a, b) and (b, a), then
-- each held one lock and waited for the other: Postgres aborted one after
-- deadlock_timeout (SQLSTATE 40P01) and its whole consumer batch was
-- nakked and backed off. Outbound keys differ from inbound ones in real
-- use (a customer key on events keyed by order), so inbound order does
-- not line them up.
--
-- Every write now takes all its keys' locks up front, each lock once, in
-- ascending order of the lock's own value, hashtext(key): sorting by the
-- key text would not do, as two keys whose hashes collide share one lock,
-- and sorted texts can reach shared locks in opposite orders. A lock is
-- held to the end of the transaction, as before, so a key's key_seq order
-- is still its commit order; the row trigger (outbox_assign_key_seq) then
-- takes locks this transaction holds already, which returns at once.
--
-- A transaction that enqueues in several calls still takes each call's
-- locks when it makes the call; a handler that writes shared keys in
-- several calls can gather them into one write (publisher.Deferred) to
-- have them all sorted.

-- outbox_lock_keys takes the transaction-scoped advisory locks of keys
-- (NULL and empty ones, which mean no key, are skipped) in ascending lock
-- order. A loop, not a PERFORM over an ordered subquery: the order the
-- locks are taken in is the point, and a loop states it.
CREATE FUNCTION hookbridge.outbox_lock_keys(keys text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    h integer;
BEGIN
    FOR h IN SELECT DISTINCT hashtext(u.k) FROM unnest(keys) AS u(k) WHERE u.k <> '' ORDER BY 1 LOOP
        PERFORM pg_advisory_xact_lock(1751281664, h);
    END LOOP;
END
$$;

-- outbox_write as in 0009, with both paths locking through
-- outbox_lock_keys before they write.
CREATE OR REPLACE FUNCTION hookbridge.outbox_write(ids text[], subjects text[], headers text[], payloads bytea[], keys text[])
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
        PERFORM hookbridge.outbox_lock_keys(keys);
        INSERT INTO hookbridge.outbox_packs (first_id, key_seq, n, event_ids, subjects, keys, headers, payloads)
        VALUES (nextval('hookbridge.outbox_id_seq'), nextval('hookbridge.outbox_key_seq'), n,
                ids, subjects, keys, headers, payloads);
        RETURN QUERY SELECT unnest(ids);
        RETURN;
    END IF;
    packed := ARRAY(SELECT p.event_id FROM hookbridge.outbox_packed(ids) AS p);
    -- The rows' trigger would lock each key as its row is inserted, in
    -- message order; locking them all first, sorted, keeps this path out
    -- of the deadlock too. A key of a message skipped below (its id is
    -- taken) is locked for nothing, which only costs the wait.
    PERFORM hookbridge.outbox_lock_keys(keys);
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
