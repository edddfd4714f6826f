-- Records that the message was postponed and returns since when: the
-- first postponement's time, kept across later ones until the message
-- fails (failure_increment.sql ends the postponement). A postponement does
-- not add to the failures counted toward max_deliver. A keyed message
-- records its ordering key ($6), so that the later events of its key that
-- apply past it mark the row (failure_mark_passed_by.sql); one that
-- applied past it in the same batch, before the row existed, is given
-- here ($7 event id, $8 stream sequence), and the first mark is kept. No
-- row when the message was applied or dead-lettered meanwhile.
INSERT INTO hookbridge.delivery_failures (consumer, source, event_id, stream_seq, failures, last_error, postponed_since,
                                          ordering_key, passed_at, passed_by_event, passed_by_seq)
SELECT $1, $2, $3, $4, 0, $5, now(), NULLIF($6::text, ''), CASE WHEN $7::text IS NULL THEN NULL ELSE now() END, $7::text, $8::bigint
WHERE NOT EXISTS (SELECT 1 FROM hookbridge.dead_letters d
                  WHERE d.consumer = $1 AND d.source = $2 AND d.event_id = $3 AND d.stream_seq = $4)
  AND NOT EXISTS (SELECT 1 FROM hookbridge.inbox i
                  WHERE i.consumer = $1 AND i.source = $2 AND i.event_id = $3 AND i.stream_seq = $4)
ON CONFLICT (consumer, source, event_id, stream_seq) DO UPDATE
	SET last_error = EXCLUDED.last_error,
	    updated_at = now(),
	    postponed_since = coalesce(delivery_failures.postponed_since, now()),
	    ordering_key = EXCLUDED.ordering_key,
	    passed_at = coalesce(delivery_failures.passed_at, EXCLUDED.passed_at),
	    passed_by_event = CASE WHEN delivery_failures.passed_at IS NULL THEN EXCLUDED.passed_by_event ELSE delivery_failures.passed_by_event END,
	    passed_by_seq = CASE WHEN delivery_failures.passed_at IS NULL THEN EXCLUDED.passed_by_seq ELSE delivery_failures.passed_by_seq END
RETURNING postponed_since
