SELECT id, created_at >= $2, status = 'sent' AND sent_at < $2
FROM hookbridge.outbox_rows
WHERE id > $1
ORDER BY id
LIMIT $3
