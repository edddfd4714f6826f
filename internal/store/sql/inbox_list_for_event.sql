-- $1 the consumers, so the primary key (consumer, source, event_id) serves it.
SELECT consumer, stream_seq, applied_at, body_sha256
FROM hookbridge.inbox WHERE consumer = ANY($1) AND source = $2 AND event_id = $3
