-- Unresolved dead letters per endpoint, and when the oldest was written.
SELECT endpoint, count(*), min(created_at)
FROM hookbridge.delivery_dead_letters
WHERE resolved_at IS NULL
GROUP BY endpoint
ORDER BY endpoint
