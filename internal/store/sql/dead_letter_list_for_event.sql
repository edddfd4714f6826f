-- $1 the consumers, so the unique key (consumer, source, event_id, stream_seq) serves it.
SELECT id, consumer, stream_seq, resolved_at, coalesce(resolution, '')
FROM hookbridge.dead_letters WHERE consumer = ANY($1) AND source = $2 AND event_id = $3
ORDER BY id
