-- An event's deliveries Postgres tracks, per endpoint.
SELECT endpoint, stream_seq, event_id, subject, ordering_key, attempts,
	CASE WHEN next_attempt_at = 'infinity' THEN NULL ELSE next_attempt_at END, origin, COALESCE(dead_letter_id, 0)
FROM hookbridge.delivery_pending
WHERE event_id = $1
ORDER BY endpoint, stream_seq
