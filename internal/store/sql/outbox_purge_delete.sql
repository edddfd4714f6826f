-- The conditions again under the row lock: a row requeued or deleted
-- since the scan is left alone.
DELETE FROM hookbridge.outbox_rows
WHERE id = ANY (ARRAY(
	SELECT id FROM hookbridge.outbox_rows
	WHERE id = ANY ($1) AND status = 'sent' AND sent_at < $2
	FOR UPDATE SKIP LOCKED))
