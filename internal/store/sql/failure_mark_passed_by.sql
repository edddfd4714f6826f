-- The postponed events that the given events of a keyed consumer pass, as
-- dead_letter_mark_passed_by.sql marks the dead letters: for each (source
-- $2, ordering key $3), the event of the transaction with the highest
-- stream sequence ($4 event id, $5 stream sequence). It runs in that
-- event's own transaction, so a dead letter the postponed event becomes
-- later starts marked (dead_letter_insert.sql), whatever crashed in
-- between. The partial index delivery_failures_unpassed serves each probe.
UPDATE hookbridge.delivery_failures f
SET passed_at = now(), passed_by_event = u.event_id, passed_by_seq = u.stream_seq
FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[]) AS u(source, ordering_key, event_id, stream_seq)
WHERE f.consumer = $1 AND f.source = u.source AND f.ordering_key = u.ordering_key
  AND f.stream_seq < u.stream_seq AND f.passed_at IS NULL
