-- An attempt succeeded at $2: the failing clock stops, unless it started
-- after that (a later failure).
UPDATE hookbridge.delivery_endpoints
SET failing_since = NULL
WHERE name = $1 AND failing_since <= $2
