-- An event's attempts on one endpoint, oldest first.
SELECT endpoint, event_id, subject, stream_seq, attempt, COALESCE(status_code, 0), error_class,
	response_excerpt, duration_ms, attempted_at
FROM hookbridge.delivery_attempts
WHERE endpoint = $1 AND event_id = $2
ORDER BY attempted_at, id
