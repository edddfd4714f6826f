-- $1 the consumers, so the primary key serves it.
SELECT consumer, stream_seq, failures
FROM hookbridge.delivery_failures WHERE consumer = ANY($1) AND source = $2 AND event_id = $3
