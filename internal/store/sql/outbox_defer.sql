-- Queued after the failure update, so it sees the blockers' new
-- next_attempt_at; a blocker that went dead blocks nothing.
UPDATE hookbridge.outbox_rows o
SET next_attempt_at = blk.next_attempt_at
FROM unnest($1::bigint[], $2::bigint[]) AS u(id, blocker)
JOIN hookbridge.outbox_rows blk ON blk.id = u.blocker
WHERE o.id = u.id AND blk.status = 'pending' AND blk.next_attempt_at > o.next_attempt_at
