-- One page of outbox rows in state $1 ('dead' or 'pending'), newest first;
-- the partial indexes on both states serve it. $2 is the last id of the
-- previous page (0: from the newest).
SELECT id, event_id, subject, attempts, coalesce(last_error, ''), created_at, next_attempt_at
FROM hookbridge.outbox
WHERE status = $1 AND ($2 = 0 OR id < $2)
ORDER BY id DESC
LIMIT $3
