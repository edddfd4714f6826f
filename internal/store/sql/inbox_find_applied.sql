-- One primary-key probe per id, however large the inbox is. The LIMIT
-- keeps the subquery from being flattened into a join, which Postgres
-- plans as a hash join over a scan of the whole inbox once it knows the
-- array holds hundreds of ids (a custom plan for a prepared statement).
SELECT x.event_id FROM unnest($3::text[]) AS u(id)
CROSS JOIN LATERAL (
	SELECT i.event_id FROM hookbridge.inbox i
	WHERE i.consumer = $1 AND i.source = $2 AND i.event_id = u.id
	LIMIT 1) AS x
