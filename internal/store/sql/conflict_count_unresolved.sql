SELECT count(*) FROM hookbridge.conflicts WHERE resolved_at IS NULL
