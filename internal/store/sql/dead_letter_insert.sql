-- The message's failure counter is deleted in the same statement: it has
-- done its job. A mark it holds (a later event of its key applied past it
-- while it was postponed, failure_mark_passed_by.sql) is the dead
-- letter's from the start. Recording the same message again keeps one row
-- and only refreshes the delivery count and error of an unresolved one,
-- and takes a mark it lacks.
WITH counter AS (
	DELETE FROM hookbridge.delivery_failures
	WHERE consumer = $1 AND source = $2 AND event_id = $3 AND stream_seq = $6
	RETURNING passed_at, passed_by_event, passed_by_seq
)
INSERT INTO hookbridge.dead_letters
	(consumer, source, event_id, event_type, subject, stream_seq, deliveries, reason, last_error, body, ordering_key,
	 passed_at, passed_by_event, passed_by_seq)
SELECT $1, $2, $3, $4::text, $5::text, $6, $7::integer, $8::text, $9::text, $10::bytea, NULLIF($11::text, ''),
       c.passed_at, c.passed_by_event, c.passed_by_seq
FROM (VALUES (1)) AS one (n) LEFT JOIN counter c ON true
ON CONFLICT (consumer, source, event_id, stream_seq) DO UPDATE
	SET deliveries = GREATEST(dead_letters.deliveries, EXCLUDED.deliveries),
	    last_error = EXCLUDED.last_error,
	    passed_at = coalesce(dead_letters.passed_at, EXCLUDED.passed_at),
	    passed_by_event = CASE WHEN dead_letters.passed_at IS NULL THEN EXCLUDED.passed_by_event ELSE dead_letters.passed_by_event END,
	    passed_by_seq = CASE WHEN dead_letters.passed_at IS NULL THEN EXCLUDED.passed_by_seq ELSE dead_letters.passed_by_seq END
	WHERE dead_letters.resolved_at IS NULL
