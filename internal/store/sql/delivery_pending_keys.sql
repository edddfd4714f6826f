-- The keys of an ordered endpoint that have deliveries in Postgres: their
-- later events must wait behind those.
SELECT DISTINCT ordering_key FROM hookbridge.delivery_pending
WHERE endpoint = $1 AND ordering_key <> ''
