-- Requeues unresolved dead letters ($1): each is marked requeued and gets
-- a pending delivery with a fresh schedule, in one statement, so a second
-- requeue of the same row (at once or concurrently) finds it resolved and
-- does nothing. On an ordered endpoint a dead letter a later event of its
-- key has passed is requeued only with $2 (out of order). A key with rows
-- already gets the requeue behind them. Returns the requeued ids and wakes
-- their endpoints' owners.
WITH requeued AS (
	UPDATE hookbridge.delivery_dead_letters
	SET resolved_at = now(), resolution = 'requeued', requeues = requeues + 1, redelivered_at = NULL
	WHERE id = ANY($1) AND resolved_at IS NULL AND ($2 OR passed_at IS NULL)
	RETURNING id, endpoint, stream_seq, event_id, subject, ordering_key
),
queued AS (
	INSERT INTO hookbridge.delivery_pending
		(endpoint, stream_seq, event_id, subject, ordering_key, next_attempt_at, origin, dead_letter_id)
	SELECT r.endpoint, r.stream_seq, r.event_id, r.subject, r.ordering_key,
		CASE WHEN r.ordering_key = '' THEN now()
		     WHEN r.stream_seq = min(r.stream_seq) OVER (PARTITION BY r.endpoint, r.ordering_key)
		      AND NOT EXISTS (SELECT 1 FROM hookbridge.delivery_pending p
		                      WHERE p.endpoint = r.endpoint AND p.ordering_key = r.ordering_key)
		     THEN now() ELSE 'infinity'::timestamptz END,
		'requeue', r.id
	FROM requeued r
	ON CONFLICT (endpoint, stream_seq) DO UPDATE
		SET origin = 'requeue', dead_letter_id = EXCLUDED.dead_letter_id, attempts = 0
	RETURNING dead_letter_id, endpoint
),
woken AS (
	SELECT pg_notify('hookbridge_delivery', endpoint) FROM (SELECT DISTINCT endpoint FROM queued) e
)
SELECT q.dead_letter_id FROM queued q, (SELECT count(*) FROM woken) w
