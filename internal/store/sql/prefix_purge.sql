-- Removes one self-test run's rows from hookbridge's tables in one
-- statement: its inbox rows, conflicts, failure counters and dead letters
-- (of consumer $1 and source $2; conflicts of the source whoever detected them) and its outbox rows ($4: their ids'
-- prefix; rows, and the packs holding such ids). Counts of each come back
-- in that order.
WITH i AS (
	DELETE FROM hookbridge.inbox WHERE consumer = $1 AND source = $2 AND starts_with(event_id, $3) RETURNING 1
), c AS (
	DELETE FROM hookbridge.conflicts WHERE source = $2 AND starts_with(event_id, $3) RETURNING 1
), f AS (
	DELETE FROM hookbridge.delivery_failures WHERE consumer = $1 AND starts_with(event_id, $3) RETURNING 1
), d AS (
	DELETE FROM hookbridge.dead_letters WHERE consumer = $1 AND starts_with(event_id, $3) RETURNING 1
), o AS (
	DELETE FROM hookbridge.outbox_rows WHERE starts_with(event_id, $4) RETURNING 1
), op AS (
	DELETE FROM hookbridge.outbox_packs p
	WHERE EXISTS (SELECT 1 FROM unnest(p.event_ids) AS e WHERE starts_with(e, $4))
	RETURNING (SELECT count(*) FROM unnest(p.event_ids) AS e WHERE starts_with(e, $4)) AS n
)
SELECT (SELECT count(*) FROM i), (SELECT count(*) FROM c), (SELECT count(*) FROM f), (SELECT count(*) FROM d),
	(SELECT count(*) FROM o) + (SELECT coalesce(sum(n), 0) FROM op)
