SELECT count(*) FROM hookbridge.outbox WHERE starts_with(event_id, $1)
