-- One page of conflicts for operators, newest first, without bodies. $1 is
-- 'false' (unresolved), 'true' (resolved) or 'all'; $2 the last id of the
-- previous page (0: from the newest).
SELECT id, detected_by, source, event_id, event_type, coalesce(original_sha256, ''::bytea),
	coalesce(original_seq, 0), rejected_sha256, coalesce(rejected_seq, 0), detected_at,
	resolved_at, coalesce(resolution, '')
FROM hookbridge.conflicts
WHERE ($1 = 'all' OR ($1 = 'false') = (resolved_at IS NULL))
  AND ($2 = 0 OR id < $2)
ORDER BY id DESC
LIMIT $3
