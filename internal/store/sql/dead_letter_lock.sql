-- Locks the consumer's unresolved dead letter of the message at $2 for
-- the rest of the transaction: a replay or requeue applies the event and
-- resolves the row in that one transaction, so a discard (an UPDATE of
-- the same row) waits for it and then finds the row resolved, and a
-- second requeue waits and then finds nothing to lock.
SELECT id FROM hookbridge.dead_letters
WHERE consumer = $1 AND stream_seq = $2 AND resolved_at IS NULL
FOR UPDATE
