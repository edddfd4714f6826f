-- A consumer's unresolved dead letters of keyed events that no later
-- event of their key has passed yet, oldest first: a member that takes a
-- partition over marks them when the next event of the key applies.
SELECT source, event_id, stream_seq, ordering_key
FROM hookbridge.dead_letters
WHERE consumer = $1 AND resolved_at IS NULL AND ordering_key IS NOT NULL AND passed_at IS NULL
ORDER BY stream_seq
