-- A dead row goes back to pending with its attempts reset, due now, and
-- the relays are woken as an insert would wake them. A row that is not
-- dead is left alone (requeueing twice changes nothing). Messages of a
-- pack are never dead: a failed one is moved to a row first.
WITH u AS (
	UPDATE hookbridge.outbox_rows
	SET status = 'pending', attempts = 0, next_attempt_at = clock_timestamp()
	WHERE id = $1 AND status = 'dead'
	RETURNING id
)
SELECT u.id, pg_notify('hookbridge_outbox', '') IS NULL FROM u
