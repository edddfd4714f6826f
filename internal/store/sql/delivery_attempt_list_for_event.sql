-- An event's attempts, on one endpoint ($1) or on every one (''), oldest
-- first.
SELECT endpoint, event_id, subject, stream_seq, attempt, COALESCE(status_code, 0), error_class,
	response_excerpt, duration_ms, attempted_at
FROM hookbridge.delivery_attempts
WHERE event_id = $2 AND ($1 = '' OR endpoint = $1)
ORDER BY endpoint, attempted_at, id
