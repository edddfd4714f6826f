-- Many HTTP attempts in one statement (the recorder's batch; one
-- statement for the batch, not one per attempt, costs Postgres a fraction
-- of the CPU at thousands of deliveries a second); no secret, no body.
INSERT INTO hookbridge.delivery_attempts
	(endpoint, event_id, subject, stream_seq, attempt, status_code, error_class, response_excerpt, duration_ms)
SELECT endpoint, event_id, subject, stream_seq, attempt, NULLIF(status_code, 0), error_class, response_excerpt, duration_ms
FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::int[], $6::int[], $7::text[], $8::text[], $9::int[])
	AS u(endpoint, event_id, subject, stream_seq, attempt, status_code, error_class, response_excerpt, duration_ms)
