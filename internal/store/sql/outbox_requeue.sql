-- A dead row goes back to pending with its attempts reset, due now, and
-- the relays are woken as an insert would wake them. A row that is not
-- dead is left alone (requeueing twice changes nothing).
WITH u AS (
	UPDATE hookbridge.outbox
	SET status = 'pending', attempts = 0, next_attempt_at = clock_timestamp()
	WHERE id = $1 AND status = 'dead'
	RETURNING id
)
SELECT u.id, pg_notify('hookbridge_outbox', '') IS NULL FROM u
