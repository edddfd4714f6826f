SELECT id, event_id, subject, status, coalesce(stream_seq, 0)
FROM hookbridge.outbox_rows WHERE event_id = $1
UNION ALL
SELECT id, event_id, subject, status, coalesce(stream_seq, 0)
FROM hookbridge.outbox_packed(ARRAY[$1::text])
LIMIT 1
