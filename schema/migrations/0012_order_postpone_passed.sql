-- Order that keeps the other promises: postponed events, and dead letters
-- marked passed in the transaction of the later event that passes them.

-- A handler may postpone an event that needs a later event of its
-- ordering key first (consumer.Postpone, or SQLSTATE HB001 from SQL). A
-- postponement is not a failure: it does not count toward max_deliver.
-- Its row in delivery_failures records when the event was first
-- postponed, which bounds how long it may wait (postpone_limit), whichever
-- instance holds it; the row goes when the event applies, as a failure
-- counter does.
ALTER TABLE hookbridge.delivery_failures ADD COLUMN postponed_since timestamptz;

-- What a consumer declared in SQL calls to postpone the event it applies:
--   SELECT hookbridge.postpone('unknown order') WHERE NOT EXISTS (...)
CREATE FUNCTION hookbridge.postpone(reason text DEFAULT 'needs a later event of its ordering key')
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION USING ERRCODE = 'HB001', MESSAGE = reason;
END
$$;

-- An event postponed for longer than postpone_limit is dead-lettered with
-- its own reason.
ALTER TABLE hookbridge.dead_letters DROP CONSTRAINT dead_letters_reason_check;
ALTER TABLE hookbridge.dead_letters ADD CONSTRAINT dead_letters_reason_check
	CHECK (reason IN ('max_deliver', 'permanent', 'unusable', 'postponed'));

-- The dead letters a later event of their key may pass: the apply of
-- every keyed event probes it in its own transaction
-- (dead_letter_mark_passed_by.sql), so it holds only the unpassed ones.
CREATE INDEX dead_letters_unpassed ON hookbridge.dead_letters (consumer, source, ordering_key, stream_seq)
	WHERE resolved_at IS NULL AND passed_at IS NULL AND ordering_key IS NOT NULL;
