-- A replay's events, due now; on an ordered endpoint ($6) a key that has
-- rows already gets them behind those. An event pending already keeps its
-- row. Returns how many rows were new, and wakes the endpoint's owner.
WITH replayed AS (
	INSERT INTO hookbridge.delivery_pending
		(endpoint, stream_seq, event_id, subject, ordering_key, next_attempt_at, origin)
	SELECT $1, r.stream_seq, r.event_id, r.subject, r.ordering_key,
		CASE WHEN NOT $6 THEN now()
		     WHEN r.stream_seq = min(r.stream_seq) OVER (PARTITION BY r.ordering_key)
		      AND NOT EXISTS (SELECT 1 FROM hookbridge.delivery_pending p
		                      WHERE p.endpoint = $1 AND p.ordering_key = r.ordering_key)
		     THEN now() ELSE 'infinity'::timestamptz END,
		'replay'
	FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[]) AS r(stream_seq, event_id, subject, ordering_key)
	ON CONFLICT (endpoint, stream_seq) DO NOTHING
	RETURNING 1
)
SELECT (SELECT count(*) FROM replayed), pg_notify('hookbridge_delivery', $1)::text
