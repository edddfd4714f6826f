-- The stored subject and payload of the messages of ids, whether a row or
-- in a pack.
SELECT event_id, subject, payload FROM hookbridge.outbox_rows WHERE event_id = ANY ($1)
UNION ALL
SELECT event_id, subject, payload FROM hookbridge.outbox_packed($1)
