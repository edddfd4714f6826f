-- An attempt failed: the failing clock starts unless it runs already.
-- Returns since when the endpoint fails and for how long (database time).
UPDATE hookbridge.delivery_endpoints
SET failing_since = COALESCE(failing_since, now())
WHERE name = $1
RETURNING failing_since, (extract(epoch FROM now() - failing_since) * 1000)::bigint
