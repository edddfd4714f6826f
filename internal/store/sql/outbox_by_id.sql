SELECT id, event_id, subject, status, coalesce(stream_seq, 0)
FROM hookbridge.outbox WHERE id = $1
