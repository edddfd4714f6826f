-- The conditions again under the row lock: a pack unpacked or deleted
-- since the scan is left alone. Returns the messages the packs held.
WITH d AS (
	DELETE FROM hookbridge.outbox_packs
	WHERE first_id = ANY (ARRAY(
		SELECT first_id FROM hookbridge.outbox_packs
		WHERE first_id = ANY ($1) AND sent_at IS NOT NULL AND sent_at < $2
		FOR UPDATE SKIP LOCKED))
	RETURNING n
)
SELECT coalesce(sum(n), 0)::bigint FROM d
