DELETE FROM hookbridge.inbox WHERE consumer = $1 AND source = $2 AND event_id = $3
