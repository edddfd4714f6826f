-- An endpoint's unresolved delivery dead letters, oldest first.
SELECT id, endpoint, event_id, subject, stream_seq, attempts, COALESCE(last_status, 0), last_error_class,
	last_excerpt, created_at
FROM hookbridge.delivery_dead_letters
WHERE endpoint = $1 AND resolved_at IS NULL
ORDER BY created_at, id
LIMIT $2
