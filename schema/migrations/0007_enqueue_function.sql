-- hookbridge.enqueue: the outbox write of publisher.Enqueue as a SQL
-- function, for consumers declared in the configuration (sql.apply), whose
-- statements run in the same transaction as the inbox claim and cannot call
-- Go. The semantics are Enqueue's, check for check:
--   * the id is 1-255 printable ASCII characters without spaces, the
--     subject "events.<token>[.<token>...]" with tokens of letters, digits,
--     '-' and '_' (at most 64 each, 200 after "events.");
--   * the same id with the same subject and payload again is a no-op, so a
--     re-run of the same logical operation cannot create a second event;
--   * the same id with another subject or payload is an error;
--   * an empty ordering key is no key.
-- The payload is stored as the UTF-8 text of the jsonb value, so two
-- payloads are the same content when they are the same JSON value (jsonb
-- normalises key order and white space). No headers are written (Go's
-- Enqueue adds the caller's trace context; SQL has none to add). The INSERT
-- fires 0002's statement-level trigger, which wakes the relays at commit,
-- exactly as an Enqueue does.
--
-- Errors carry SQLSTATEs of classes 22 and 23, which SQL consumers treat as
-- permanent: retrying a bad id or a reused one cannot help.
CREATE FUNCTION hookbridge.enqueue(id text, subject text, payload jsonb, key text DEFAULT NULL) RETURNS void
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

    INSERT INTO hookbridge.outbox (event_id, subject, headers, payload, ordering_key)
    VALUES (enqueue.id, enqueue.subject, NULL, body, NULLIF(enqueue.key, ''))
    ON CONFLICT DO NOTHING;
    IF FOUND THEN
        RETURN;
    END IF;

    SELECT o.subject, o.payload INTO stored_subject, stored_payload
    FROM hookbridge.outbox o WHERE o.event_id = enqueue.id;
    IF NOT FOUND THEN
        -- Skipped as a conflict yet invisible to this snapshot: only a
        -- concurrent writer's row under REPEATABLE READ or SERIALIZABLE
        -- (Enqueue's "row not visible"); retrying can help.
        RAISE EXCEPTION 'enqueue outbox event %: read existing: row not visible', enqueue.id;
    END IF;
    IF stored_subject <> enqueue.subject OR stored_payload <> body THEN
        RAISE EXCEPTION 'enqueue outbox event %: outbox event id reused with different content', enqueue.id
            USING ERRCODE = 'unique_violation';
    END IF;
END
$$;
