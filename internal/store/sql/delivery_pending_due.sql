-- An endpoint's deliveries that are due, the longest due first.
SELECT stream_seq, event_id, subject, ordering_key, attempts, next_attempt_at, origin, COALESCE(dead_letter_id, 0)
FROM hookbridge.delivery_pending
WHERE endpoint = $1 AND next_attempt_at <= now()
ORDER BY next_attempt_at, stream_seq
LIMIT $2
