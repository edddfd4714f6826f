SELECT consumer, count(*) FROM hookbridge.dead_letters
WHERE resolved_at IS NULL GROUP BY consumer
