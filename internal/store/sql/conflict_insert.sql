INSERT INTO hookbridge.conflicts
	(detected_by, source, event_id, event_type, original_sha256, original_seq, rejected_sha256, rejected_seq, rejected_body)
VALUES ($1, $2, $3, $4, $5, NULLIF($6, 0), $7, NULLIF($8, 0), $9)
ON CONFLICT DO NOTHING
