-- SKIP LOCKED lets concurrent relays take disjoint rows without waiting.
-- headers is NULL when a row has none (migration 0006; older rows hold {}).
SELECT id, event_id, subject, coalesce(headers::text, ''), payload, ordering_key, key_seq, attempts, next_attempt_at
FROM hookbridge.outbox_rows
WHERE status = 'pending' AND next_attempt_at <= now()
ORDER BY next_attempt_at, id
LIMIT $1
FOR UPDATE SKIP LOCKED
