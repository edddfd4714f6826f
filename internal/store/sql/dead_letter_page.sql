-- One page of dead letters for operators, newest first, without bodies.
-- $3 is 'false' (unresolved), 'true' (resolved) or 'all'; $4 the last id
-- of the previous page (0: from the newest).
SELECT id, consumer, source, event_id, event_type, subject, stream_seq, deliveries, reason,
       last_error, ''::bytea, dead_at, resolved_at, coalesce(resolution, ''), coalesce(resolution_note, ''),
       coalesce(ordering_key, ''), passed_at, coalesce(passed_by_event, ''), coalesce(passed_by_seq, 0)
FROM hookbridge.dead_letters
WHERE ($1 = '' OR consumer = $1)
  AND ($2 = '' OR event_type = $2)
  AND ($3 = 'all' OR ($3 = 'false') = (resolved_at IS NULL))
  AND ($4 = 0 OR id < $4)
ORDER BY id DESC
LIMIT $5
