-- The newest $1 conflicts, without bodies.
SELECT id, detected_by, source, event_id, event_type, coalesce(original_sha256, ''::bytea),
	coalesce(original_seq, 0), rejected_sha256, coalesce(rejected_seq, 0), detected_at,
	resolved_at, coalesce(resolution, '')
FROM hookbridge.conflicts ORDER BY id DESC LIMIT $1
