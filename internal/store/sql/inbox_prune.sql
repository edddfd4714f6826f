-- One bounded step of retention: at most $2 rows applied before $1.
DELETE FROM hookbridge.inbox
WHERE ctid = ANY (ARRAY(
	SELECT ctid FROM hookbridge.inbox WHERE applied_at < $1 LIMIT $2))
