-- The first pending rows of each key ($1), as many as $2 says. A row
-- written with triggers off has no key_seq and sorts last.
SELECT u.k, p.id, p.key_seq, p.next_attempt_at <= now(), p.next_attempt_at
FROM unnest($1::text[], $2::int[]) AS u(k, n)
CROSS JOIN LATERAL (
	SELECT o.id, o.next_attempt_at, o.key_seq
	FROM hookbridge.outbox_rows o
	WHERE o.status = 'pending' AND o.ordering_key = u.k
	ORDER BY o.key_seq, o.id
	LIMIT u.n) AS p
ORDER BY u.k, p.key_seq, p.id
