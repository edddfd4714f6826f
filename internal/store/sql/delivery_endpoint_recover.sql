-- An attempt succeeded: the failing clock stops. (A failure recorded a
-- moment before is cleared with it: the clock starts again at the next
-- failure, a little late rather than early.)
UPDATE hookbridge.delivery_endpoints
SET failing_since = NULL
WHERE name = $1 AND failing_since IS NOT NULL
