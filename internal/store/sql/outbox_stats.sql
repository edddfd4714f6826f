-- Pending and dead rows are counted with their partial indexes; sent rows
-- are all the others (one snapshot, so the difference is exact).
WITH c AS (SELECT
	(SELECT count(*) FROM hookbridge.outbox WHERE status = 'pending') AS pending,
	(SELECT count(*) FROM hookbridge.outbox WHERE status = 'dead') AS dead,
	(SELECT count(*) FROM hookbridge.outbox) AS total)
SELECT c.pending, c.dead, c.total - c.pending - c.dead,
	(SELECT extract(epoch FROM clock_timestamp() - min(created_at)) * 1000
	   FROM hookbridge.outbox WHERE status = 'pending')::float8
FROM c
