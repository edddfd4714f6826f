-- Pending packs this relay does not hold ($2) that come before key_seq $1
-- and share an ordering key with it ($3): their messages go first, so
-- the relay's own messages of those keys must wait.
SELECT first_id, key_seq, keys
FROM hookbridge.outbox_packs
WHERE sent_at IS NULL AND key_seq < $1 AND first_id <> ALL ($2) AND keys && $3
