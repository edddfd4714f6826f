SELECT id, consumer, source, event_id, event_type, subject, stream_seq, deliveries, reason,
       last_error, body, dead_at, resolved_at, coalesce(resolution, ''), coalesce(resolution_note, ''),
       coalesce(ordering_key, ''), passed_at, coalesce(passed_by_event, ''), coalesce(passed_by_seq, 0)
FROM hookbridge.dead_letters WHERE id = $1
