-- The delivery failed its endpoint's whole schedule. Writing the same
-- message again (a sender that stopped before its Term) keeps one row and
-- refreshes an unresolved one.
INSERT INTO hookbridge.delivery_dead_letters
	(endpoint, event_id, subject, stream_seq, attempts, last_status, last_error_class, last_excerpt)
VALUES ($1, $2, $3, $4, $5, NULLIF($6, 0), $7, $8)
ON CONFLICT (endpoint, stream_seq) DO UPDATE
	SET attempts = GREATEST(delivery_dead_letters.attempts, EXCLUDED.attempts),
	    last_status = EXCLUDED.last_status,
	    last_error_class = EXCLUDED.last_error_class,
	    last_excerpt = EXCLUDED.last_excerpt
	WHERE delivery_dead_letters.resolved_at IS NULL
