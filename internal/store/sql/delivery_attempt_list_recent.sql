-- An endpoint's latest attempts, newest first.
SELECT endpoint, event_id, subject, stream_seq, attempt, COALESCE(status_code, 0), error_class,
	response_excerpt, duration_ms, attempted_at
FROM hookbridge.delivery_attempts
WHERE endpoint = $1
ORDER BY attempted_at DESC, id DESC
LIMIT $2
