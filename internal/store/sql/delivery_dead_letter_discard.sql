-- Discards unresolved dead letters; returns the ids discarded.
UPDATE hookbridge.delivery_dead_letters
SET resolved_at = now(), resolution = 'discarded'
WHERE id = ANY($1) AND resolved_at IS NULL
RETURNING id
