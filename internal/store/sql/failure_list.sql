-- The messages failing right now, the most recent failure first; the table
-- holds only those, so it stays small.
SELECT consumer, source, event_id, stream_seq, failures, last_error, updated_at, postponed_since
FROM hookbridge.delivery_failures
ORDER BY updated_at DESC, consumer, source, event_id
LIMIT $1
