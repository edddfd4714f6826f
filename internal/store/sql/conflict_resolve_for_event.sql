-- Every unresolved conflict of one event of a source, whoever detected
-- it: for rows a run made on purpose and checked.
UPDATE hookbridge.conflicts SET resolved_at = now(), resolution = $3
WHERE source = $1 AND event_id = $2 AND resolved_at IS NULL
