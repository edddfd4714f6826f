-- No row when the message was applied or dead-lettered meanwhile. A
-- failure ends a postponement (postponed_since goes): the event now holds
-- its key and counts toward max_deliver, and is shown failing; postponed
-- again, it starts a new wait.
INSERT INTO hookbridge.delivery_failures (consumer, source, event_id, stream_seq, failures, last_error)
SELECT $1, $2, $3, $4, 1, $5
WHERE NOT EXISTS (SELECT 1 FROM hookbridge.dead_letters d
                  WHERE d.consumer = $1 AND d.source = $2 AND d.event_id = $3 AND d.stream_seq = $4)
  AND NOT EXISTS (SELECT 1 FROM hookbridge.inbox i
                  WHERE i.consumer = $1 AND i.source = $2 AND i.event_id = $3 AND i.stream_seq = $4)
ON CONFLICT (consumer, source, event_id, stream_seq) DO UPDATE
	SET failures = delivery_failures.failures + 1,
	    last_error = EXCLUDED.last_error,
	    updated_at = now(),
	    postponed_since = NULL
RETURNING failures
