SELECT first_id, created_at >= $2, sent_at IS NOT NULL AND sent_at < $2
FROM hookbridge.outbox_packs
WHERE first_id > $1
ORDER BY first_id
LIMIT $3
