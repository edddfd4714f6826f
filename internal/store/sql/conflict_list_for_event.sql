-- $1 the detectors (the consumers and 'ingress'), so the unique key
-- (detected_by, source, event_id, rejected_sha256) serves it.
SELECT id, detected_by, source, event_id, event_type, coalesce(original_sha256, ''::bytea),
	coalesce(original_seq, 0), rejected_sha256, coalesce(rejected_seq, 0), detected_at,
	resolved_at, coalesce(resolution, '')
FROM hookbridge.conflicts WHERE detected_by = ANY($1) AND source = $2 AND event_id = $3
ORDER BY id
