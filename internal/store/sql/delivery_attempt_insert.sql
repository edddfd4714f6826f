-- One HTTP attempt of an event to an endpoint; no secret, no body.
INSERT INTO hookbridge.delivery_attempts
	(endpoint, event_id, subject, stream_seq, attempt, status_code, error_class, response_excerpt, duration_ms)
VALUES ($1, $2, $3, $4, $5, NULLIF($6, 0), $7, $8, $9)
