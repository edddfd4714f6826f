-- A later event ($3 is its stream sequence) of an ordered endpoint's key
-- is about to be sent: the key's dead letters before it are passed from
-- now on (a requeue then needs the out-of-order flag). Returns whether one
-- of them is requeued and not delivered yet (the later event must then
-- wait behind the requeue, which is pending in Postgres), and whether the
-- key keeps an unpassed dead letter at or after $3 (an event sent again,
-- by a replay, before its key's dead letter: a later event passes it).
WITH passed AS (
	UPDATE hookbridge.delivery_dead_letters
	SET passed_at = now()
	WHERE endpoint = $1 AND ordering_key = $2 AND stream_seq < $3 AND passed_at IS NULL
	  AND (resolution IS NULL OR resolution = 'requeued')
	RETURNING resolution IS NOT NULL AND redelivered_at IS NULL AS pending
)
SELECT COALESCE((SELECT bool_or(pending) FROM passed), false),
	EXISTS (SELECT 1 FROM hookbridge.delivery_dead_letters
	        WHERE endpoint = $1 AND ordering_key = $2 AND stream_seq >= $3 AND passed_at IS NULL
	          AND (resolution IS NULL OR resolution = 'requeued'))
