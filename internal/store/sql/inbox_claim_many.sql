-- inbox_claim.sql for many events; $1 is the consumer, then one array per
-- column. The returned keys are the events claimed now; the others were in
-- the inbox already (or claimed by a racing delivery that committed first:
-- the INSERT waits for it, as the single claim does).
INSERT INTO hookbridge.inbox (consumer, source, event_id, event_type, body_sha256, stream_seq)
SELECT $1, k.source, k.event_id, k.event_type, k.body_sha256, k.stream_seq
FROM unnest($2::text[], $3::text[], $4::text[], $5::bytea[], $6::bigint[])
	AS k(source, event_id, event_type, body_sha256, stream_seq)
ON CONFLICT DO NOTHING
RETURNING source, event_id
