-- One delivery Postgres tracks, by stream sequence.
SELECT stream_seq, event_id, subject, ordering_key, attempts,
	CASE WHEN next_attempt_at = 'infinity' THEN NULL ELSE next_attempt_at END, origin, COALESCE(dead_letter_id, 0)
FROM hookbridge.delivery_pending
WHERE endpoint = $1 AND stream_seq = $2
