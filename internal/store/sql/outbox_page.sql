-- One page of outbox messages in state $1 ('dead' or 'pending'), newest
-- first; the partial indexes on both states serve the rows. Pending packs
-- are read newest first too, at most as many as the page holds (each has a
-- message), and a pack below $2 may still hold messages at or above it,
-- shown on the page before. $2 is the last id of the previous page (0:
-- from the newest).
SELECT id, event_id, subject, attempts, last_error, created_at, next_attempt_at FROM (
	(SELECT id, event_id, subject, attempts, coalesce(last_error, '') AS last_error, created_at, next_attempt_at
	 FROM hookbridge.outbox_rows
	 WHERE status = $1 AND ($2 = 0 OR id < $2)
	 ORDER BY id DESC
	 LIMIT $3)
	UNION ALL
	SELECT p.first_id + m.ord - 1, m.event_id, m.subject, 0, '', p.created_at, p.created_at
	FROM (SELECT first_id, created_at, event_ids, subjects FROM hookbridge.outbox_packs
	      WHERE $1 = 'pending' AND sent_at IS NULL AND ($2 = 0 OR first_id < $2)
	      ORDER BY first_id DESC
	      LIMIT $3) AS p
	CROSS JOIN LATERAL unnest(p.event_ids, p.subjects) WITH ORDINALITY AS m(event_id, subject, ord)
	WHERE $2 = 0 OR p.first_id + m.ord - 1 < $2
) AS o
ORDER BY id DESC
LIMIT $3
