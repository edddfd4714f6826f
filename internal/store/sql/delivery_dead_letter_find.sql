-- Dead letters by id ($1, NULL: any) or by filter: endpoint, event id,
-- subject ('' for any), created from $5 to before $6 (NULL: open), and
-- whether resolved ones count ($7); oldest first, at most $8. The body is
-- not read (delivery_dead_letter_body.sql).
SELECT id, endpoint, event_id, subject, stream_seq, attempts, COALESCE(last_status, 0), last_error_class,
	last_excerpt, ordering_key, created_at, resolved_at, COALESCE(resolution, ''), passed_at, requeues,
	redelivered_at, payload IS NOT NULL
FROM hookbridge.delivery_dead_letters
WHERE ($1::bigint[] IS NULL OR id = ANY($1))
  AND ($2 = '' OR endpoint = $2)
  AND ($3 = '' OR event_id = $3)
  AND ($4 = '' OR subject = $4)
  AND ($5::timestamptz IS NULL OR created_at >= $5)
  AND ($6::timestamptz IS NULL OR created_at < $6)
  AND ($7 OR resolved_at IS NULL)
ORDER BY created_at, id
LIMIT $8
