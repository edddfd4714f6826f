SELECT count(*) FROM hookbridge.conflicts
