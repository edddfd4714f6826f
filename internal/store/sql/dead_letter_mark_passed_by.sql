-- The dead letters that the given events of a keyed consumer pass: for
-- each (source $2, ordering key $3), the event of the transaction with the
-- highest stream sequence ($4 event id, $5 stream sequence), which applies,
-- or was applied before, after an earlier event of its key was
-- dead-lettered; the transaction's other events of the key commit with it. It runs in that
-- event's own transaction, so the mark commits with the effect (a crash
-- cannot leave an event applied past an unmarked dead letter), and it
-- locks the row: a requeue of the dead letter, which locks it too and
-- checks the mark, either commits before the later event does or sees it
-- marked. The partial index dead_letters_unpassed serves each probe.
UPDATE hookbridge.dead_letters d
SET passed_at = now(), passed_by_event = u.event_id, passed_by_seq = u.stream_seq
FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[]) AS u(source, ordering_key, event_id, stream_seq)
WHERE d.consumer = $1 AND d.source = u.source AND d.ordering_key = u.ordering_key
  AND d.stream_seq < u.stream_seq AND d.resolved_at IS NULL AND d.passed_at IS NULL
