SELECT count(*) FROM hookbridge.dead_letters WHERE consumer = $1 AND starts_with(event_id, $2)
