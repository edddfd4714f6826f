-- Only an unresolved conflict changes: resolving twice keeps the first
-- decision.
UPDATE hookbridge.conflicts SET resolved_at = now(), resolution = $2
WHERE id = $1 AND resolved_at IS NULL
