-- The first of a key's deliveries (ordered endpoints), and how many
-- milliseconds until it is due by the database's clock (0: due; its time
-- was written with that clock, so it is compared with no other).
SELECT stream_seq, event_id, subject, ordering_key, attempts,
	CASE WHEN next_attempt_at = 'infinity' THEN NULL ELSE next_attempt_at END, origin, COALESCE(dead_letter_id, 0),
	CASE WHEN next_attempt_at = 'infinity' THEN 0
	     ELSE GREATEST(0, (extract(epoch FROM next_attempt_at - now()) * 1000)::bigint) END
FROM hookbridge.delivery_pending
WHERE endpoint = $1 AND ordering_key = $2
ORDER BY stream_seq
LIMIT 1
