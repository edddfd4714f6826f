UPDATE hookbridge.dead_letters SET resolved_at = now(), resolution = $3
WHERE consumer = $1 AND stream_seq = $2 AND resolved_at IS NULL
