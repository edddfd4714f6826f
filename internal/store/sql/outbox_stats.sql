-- Pending and dead rows are counted with their partial indexes, and sent
-- rows are all the others (one snapshot, so the difference is exact);
-- packs add their messages, pending or sent, from their indexes. The
-- oldest pending pack is the first in the relay's order (key_seq, drawn
-- as it is written): min(created_at) would walk the created_at index
-- through every kept sent pack first.
WITH c AS (SELECT
	(SELECT count(*) FROM hookbridge.outbox_rows WHERE status = 'pending') AS pending,
	(SELECT count(*) FROM hookbridge.outbox_rows WHERE status = 'dead') AS dead,
	(SELECT count(*) FROM hookbridge.outbox_rows) AS total,
	(SELECT coalesce(sum(n), 0) FROM hookbridge.outbox_packs WHERE sent_at IS NULL) AS packed,
	(SELECT coalesce(sum(n), 0) FROM hookbridge.outbox_packs) AS packed_total)
SELECT c.pending + c.packed, c.dead, c.total - c.pending - c.dead + c.packed_total - c.packed,
	(SELECT extract(epoch FROM clock_timestamp() - least(
		(SELECT min(created_at) FROM hookbridge.outbox_rows WHERE status = 'pending'),
		(SELECT created_at FROM hookbridge.outbox_packs WHERE sent_at IS NULL ORDER BY key_seq LIMIT 1))) * 1000)::float8
FROM c
