DELETE FROM hookbridge.delivery_failures f
USING unnest($2::text[], $3::text[], $4::bigint[]) AS k(source, event_id, stream_seq)
WHERE f.consumer = $1 AND f.source = k.source AND f.event_id = k.event_id AND f.stream_seq = k.stream_seq
