-- Conflicts of a source's events whose id starts with a prefix, whoever
-- detected them (the ingress inside the duplicate window, a consumer after).
SELECT count(*) FROM hookbridge.conflicts WHERE source = $1 AND starts_with(event_id, $2)
