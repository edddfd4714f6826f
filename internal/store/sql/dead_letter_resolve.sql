-- One message's row: source and event id too, since after HOOKS was
-- recreated a stream sequence can also name an older event's dead letter,
-- which this apply did not apply.
UPDATE hookbridge.dead_letters SET resolved_at = now(), resolution = $5
WHERE consumer = $1 AND source = $2 AND event_id = $3 AND stream_seq = $4 AND resolved_at IS NULL
