-- A failed attempt of a delivery, written by the endpoint's owner ($2)
-- only: the lease is locked and checked in the same statement. Returns a
-- row when written (none: the lease ran out). A requeue or a replay keeps
-- its origin.
WITH lease AS (
	SELECT 1 FROM hookbridge.delivery_endpoints
	WHERE name = $1 AND owner = $2 AND lease_until > now()
	FOR SHARE
)
INSERT INTO hookbridge.delivery_pending
	(endpoint, stream_seq, event_id, subject, ordering_key, attempts, next_attempt_at, origin)
SELECT $1, $3, $4, $5, $6, $7, now() + make_interval(secs => $8), 'failed'
FROM lease
ON CONFLICT (endpoint, stream_seq) DO UPDATE
	SET attempts = EXCLUDED.attempts, next_attempt_at = EXCLUDED.next_attempt_at
RETURNING 1
