-- Pending and dead rows are counted with their partial indexes, and sent
-- rows are all the others (one snapshot, so the difference is exact);
-- packs add their messages, pending or sent.
WITH c AS (SELECT
	(SELECT count(*) FROM hookbridge.outbox_rows WHERE status = 'pending') AS pending,
	(SELECT count(*) FROM hookbridge.outbox_rows WHERE status = 'dead') AS dead,
	(SELECT count(*) FROM hookbridge.outbox_rows) AS total,
	(SELECT coalesce(sum(n), 0) FROM hookbridge.outbox_packs WHERE sent_at IS NULL) AS packed,
	(SELECT coalesce(sum(n), 0) FROM hookbridge.outbox_packs) AS packed_total)
SELECT c.pending + c.packed, c.dead, c.total - c.pending - c.dead + c.packed_total - c.packed,
	(SELECT extract(epoch FROM clock_timestamp() - least(
		(SELECT min(created_at) FROM hookbridge.outbox_rows WHERE status = 'pending'),
		(SELECT min(created_at) FROM hookbridge.outbox_packs WHERE sent_at IS NULL))) * 1000)::float8
FROM c
