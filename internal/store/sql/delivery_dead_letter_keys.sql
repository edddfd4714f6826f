-- The keys of an ordered endpoint with a dead letter no later event of
-- the key has passed yet.
SELECT DISTINCT ordering_key FROM hookbridge.delivery_dead_letters
WHERE endpoint = $1 AND ordering_key <> '' AND passed_at IS NULL
  AND (resolution IS NULL OR resolution = 'requeued')
