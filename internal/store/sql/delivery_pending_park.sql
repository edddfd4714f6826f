-- Events of an ordered endpoint parked behind an earlier event of their
-- key that Postgres tracks, written by the endpoint's owner ($2) only.
-- Each key's first event becomes due now when its key has no row yet;
-- the others wait ('infinity') until the one before them is done.
-- Returns whether the lease held and how many rows were new.
WITH lease AS (
	SELECT 1 FROM hookbridge.delivery_endpoints
	WHERE name = $1 AND owner = $2 AND lease_until > now()
	FOR SHARE
),
parked AS (
	INSERT INTO hookbridge.delivery_pending
		(endpoint, stream_seq, event_id, subject, ordering_key, next_attempt_at, origin)
	SELECT $1, r.stream_seq, r.event_id, r.subject, r.ordering_key,
		CASE WHEN r.stream_seq = min(r.stream_seq) OVER (PARTITION BY r.ordering_key)
		      AND NOT EXISTS (SELECT 1 FROM hookbridge.delivery_pending p
		                      WHERE p.endpoint = $1 AND p.ordering_key = r.ordering_key)
		     THEN now() ELSE 'infinity'::timestamptz END,
		'parked'
	FROM unnest($3::bigint[], $4::text[], $5::text[], $6::text[]) AS r(stream_seq, event_id, subject, ordering_key), lease
	ON CONFLICT (endpoint, stream_seq) DO NOTHING
	RETURNING 1
)
SELECT (SELECT count(*) FROM lease) > 0, (SELECT count(*) FROM parked)
