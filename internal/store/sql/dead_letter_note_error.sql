UPDATE hookbridge.dead_letters SET last_error = $3
WHERE consumer = $1 AND stream_seq = $2 AND resolved_at IS NULL
