-- The delivery failed its endpoint's whole schedule: the row keeps what a
-- requeue sends (body and headers), so EVENTS may trim the event. The same
-- message dead-lettered again (a requeue or a replay that failed too, or a
-- sender that stopped before its Term) keeps one row, reopened and
-- refreshed; its body stays when none is given.
INSERT INTO hookbridge.delivery_dead_letters
	(endpoint, event_id, subject, stream_seq, attempts, last_status, last_error_class, last_excerpt,
	 payload, headers, ordering_key)
VALUES ($1, $2, $3, $4, $5, NULLIF($6, 0), $7, $8, $9, $10, $11)
ON CONFLICT (endpoint, stream_seq) DO UPDATE
	SET attempts = EXCLUDED.attempts,
	    last_status = EXCLUDED.last_status,
	    last_error_class = EXCLUDED.last_error_class,
	    last_excerpt = EXCLUDED.last_excerpt,
	    payload = COALESCE(EXCLUDED.payload, delivery_dead_letters.payload),
	    headers = COALESCE(EXCLUDED.headers, delivery_dead_letters.headers),
	    resolved_at = NULL,
	    resolution = NULL,
	    redelivered_at = NULL
RETURNING id
