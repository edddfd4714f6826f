-- Without bodies; an empty filter field matches everything, $9 = -1 is no limit.
SELECT id, consumer, source, event_id, event_type, subject, stream_seq, deliveries, reason,
       last_error, ''::bytea, dead_at, resolved_at, coalesce(resolution, ''), coalesce(resolution_note, ''),
       coalesce(ordering_key, ''), passed_at, coalesce(passed_by_event, ''), coalesce(passed_by_seq, 0)
FROM hookbridge.dead_letters
WHERE ($1 = '' OR consumer = $1)
  AND (NOT $2 OR resolved_at IS NULL)
  AND ($3 = '' OR event_type = $3)
  AND ($4 = '' OR event_id = $4)
  AND ($5 = 0 OR stream_seq >= $5)
  AND ($6 = 0 OR stream_seq <= $6)
  AND ($7::timestamptz IS NULL OR dead_at >= $7)
  AND ($8::timestamptz IS NULL OR dead_at < $8)
ORDER BY stream_seq, id
LIMIT NULLIF($9, -1)
