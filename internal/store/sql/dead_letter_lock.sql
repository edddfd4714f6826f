-- Locks the consumer's unresolved dead letter of one message (source,
-- event id and stream sequence: after HOOKS was recreated a sequence can
-- also name an older event's row) for the rest of the transaction: a replay or requeue applies the event and
-- resolves the row in that one transaction, so a discard (an UPDATE of
-- the same row) waits for it and then finds the row resolved, and a
-- second requeue waits and then finds nothing to lock. It says whether a
-- later event of its key has passed it: that event marks it in its own
-- transaction (dead_letter_mark_passed_by.sql), which this lock orders
-- against the requeue.
SELECT passed_at IS NOT NULL FROM hookbridge.dead_letters
WHERE consumer = $1 AND source = $2 AND event_id = $3 AND stream_seq = $4 AND resolved_at IS NULL
FOR UPDATE
