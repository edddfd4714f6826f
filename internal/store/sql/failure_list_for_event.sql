-- $1 the consumers, so the primary key serves it.
SELECT consumer, stream_seq, failures, last_error, updated_at, postponed_since
FROM hookbridge.delivery_failures WHERE consumer = ANY($1) AND source = $2 AND event_id = $3
