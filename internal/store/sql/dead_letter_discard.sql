-- The row is kept, marked; only an unresolved one changes, so a second
-- discard (or a discard after a requeue) changes nothing.
UPDATE hookbridge.dead_letters
SET resolved_at = now(), resolution = 'discarded', resolution_note = $2
WHERE id = $1 AND resolved_at IS NULL
