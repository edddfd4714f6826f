-- A delivery is over (delivered or dead-lettered): its row goes, and the
-- next row of its key ($3), if any, becomes due. Returns how many rows the
-- key has left (0 or 1: whether any).
WITH done AS (
	DELETE FROM hookbridge.delivery_pending WHERE endpoint = $1 AND stream_seq = $2
),
next AS (
	SELECT p.stream_seq FROM hookbridge.delivery_pending p
	WHERE p.endpoint = $1 AND p.ordering_key = $3 AND p.stream_seq <> $2
	ORDER BY p.stream_seq
	LIMIT 1
),
promoted AS (
	UPDATE hookbridge.delivery_pending p SET next_attempt_at = now()
	FROM next
	WHERE p.endpoint = $1 AND p.stream_seq = next.stream_seq AND p.next_attempt_at = 'infinity'
)
SELECT count(*) FROM next
