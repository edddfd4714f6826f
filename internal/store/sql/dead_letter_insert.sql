-- The message's failure counter is deleted in the same statement: it has
-- done its job. Recording the same message again keeps one row and only
-- refreshes the delivery count and error of an unresolved one.
WITH counter AS (
	DELETE FROM hookbridge.delivery_failures
	WHERE consumer = $1 AND source = $2 AND event_id = $3 AND stream_seq = $6
)
INSERT INTO hookbridge.dead_letters
	(consumer, source, event_id, event_type, subject, stream_seq, deliveries, reason, last_error, body, ordering_key)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, NULLIF($11, ''))
ON CONFLICT (consumer, source, event_id, stream_seq) DO UPDATE
	SET deliveries = GREATEST(dead_letters.deliveries, EXCLUDED.deliveries),
	    last_error = EXCLUDED.last_error
	WHERE dead_letters.resolved_at IS NULL
