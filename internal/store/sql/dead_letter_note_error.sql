-- One message's row (see dead_letter_resolve.sql).
UPDATE hookbridge.dead_letters SET last_error = $5
WHERE consumer = $1 AND source = $2 AND event_id = $3 AND stream_seq = $4 AND resolved_at IS NULL
