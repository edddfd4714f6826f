-- A delivery instance announces itself and the endpoints it has.
INSERT INTO hookbridge.delivery_instances (id, host, pid, endpoints)
VALUES ($1, $2, $3, $4)
ON CONFLICT (id) DO UPDATE SET seen_at = now(), endpoints = EXCLUDED.endpoints
