SELECT event_id, subject, payload FROM hookbridge.outbox WHERE event_id = ANY($1)
