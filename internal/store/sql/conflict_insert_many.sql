-- conflict_insert.sql for many conflicts of one detector ($1).
INSERT INTO hookbridge.conflicts
	(detected_by, source, event_id, event_type, original_sha256, original_seq, rejected_sha256, rejected_seq, rejected_body)
SELECT $1, c.source, c.event_id, c.event_type, c.original_sha256, NULLIF(c.original_seq, 0),
	c.rejected_sha256, NULLIF(c.rejected_seq, 0), c.rejected_body
FROM unnest($2::text[], $3::text[], $4::text[], $5::bytea[], $6::bigint[], $7::bytea[], $8::bigint[], $9::bytea[])
	AS c(source, event_id, event_type, original_sha256, original_seq, rejected_sha256, rejected_seq, rejected_body)
ON CONFLICT DO NOTHING
