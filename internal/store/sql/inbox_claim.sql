-- The inbox claim of one event: an INSERT … ON CONFLICT DO NOTHING, never
-- a prior SELECT. When two deliveries race, the second waits on the
-- first's row lock and, once that commits, inserts nothing; if the first
-- rolls back, the second claims the key itself.
INSERT INTO hookbridge.inbox (consumer, source, event_id, event_type, body_sha256, stream_seq)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT DO NOTHING
