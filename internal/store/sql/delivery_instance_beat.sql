-- A delivery instance announces itself.
INSERT INTO hookbridge.delivery_instances (id, host, pid)
VALUES ($1, $2, $3)
ON CONFLICT (id) DO UPDATE SET seen_at = now()
