-- The first of a key's deliveries (ordered endpoints).
SELECT stream_seq, event_id, subject, ordering_key, attempts,
	CASE WHEN next_attempt_at = 'infinity' THEN NULL ELSE next_attempt_at END, origin, COALESCE(dead_letter_id, 0)
FROM hookbridge.delivery_pending
WHERE endpoint = $1 AND ordering_key = $2
ORDER BY stream_seq
LIMIT 1
