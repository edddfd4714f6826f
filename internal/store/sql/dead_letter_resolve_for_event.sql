-- Every unresolved dead letter of one event of a consumer, whatever its
-- stream sequence: for rows a run made on purpose and checked.
UPDATE hookbridge.dead_letters SET resolved_at = now(), resolution = $4, resolution_note = $5
WHERE consumer = $1 AND source = $2 AND event_id = $3 AND resolved_at IS NULL
