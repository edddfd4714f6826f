-- Records that the message was postponed and returns since when: the
-- first postponement's time, kept across later ones until the message
-- fails (failure_increment.sql ends the postponement). A postponement does
-- not add to the failures counted toward max_deliver. No row when the
-- message was applied or dead-lettered meanwhile.
INSERT INTO hookbridge.delivery_failures (consumer, source, event_id, stream_seq, failures, last_error, postponed_since)
SELECT $1, $2, $3, $4, 0, $5, now()
WHERE NOT EXISTS (SELECT 1 FROM hookbridge.dead_letters d
                  WHERE d.consumer = $1 AND d.source = $2 AND d.event_id = $3 AND d.stream_seq = $4)
  AND NOT EXISTS (SELECT 1 FROM hookbridge.inbox i
                  WHERE i.consumer = $1 AND i.source = $2 AND i.event_id = $3 AND i.stream_seq = $4)
ON CONFLICT (consumer, source, event_id, stream_seq) DO UPDATE
	SET last_error = EXCLUDED.last_error,
	    updated_at = now(),
	    postponed_since = coalesce(delivery_failures.postponed_since, now())
RETURNING postponed_since
