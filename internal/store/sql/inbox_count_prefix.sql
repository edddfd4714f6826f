SELECT count(*) FROM hookbridge.inbox
WHERE consumer = $1 AND source = $2 AND starts_with(event_id, $3)
