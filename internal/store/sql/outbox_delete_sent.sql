-- Rows published with no retention: deleting them is what marks them
-- sent (a delete writes a few dozen bytes of WAL, an update a new row).
DELETE FROM hookbridge.outbox_rows WHERE id = ANY ($1)
