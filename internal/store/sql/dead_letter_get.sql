SELECT id, consumer, source, event_id, event_type, subject, stream_seq, deliveries, reason,
       last_error, body, dead_at, resolved_at, coalesce(resolution, ''), coalesce(resolution_note, '')
FROM hookbridge.dead_letters WHERE id = $1
