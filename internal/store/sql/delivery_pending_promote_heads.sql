-- Makes due the first row of each key ($2, of endpoint $1 at the same
-- index) that waits ('infinity') with no row of its key before it, and
-- wakes the endpoints' owners. A requeue or a replay whose statement saw
-- a row of the key that ended before it committed put its row behind that
-- row, and the row's end (delivery_pending_done.sql) did not see it to
-- make it due: run after such a statement commits, this does. Returns one
-- row per endpoint woken.
WITH k AS (
	SELECT DISTINCT endpoint, ordering_key
	FROM unnest($1::text[], $2::text[]) AS k(endpoint, ordering_key)
	WHERE ordering_key <> ''
),
promoted AS (
	UPDATE hookbridge.delivery_pending p SET next_attempt_at = now()
	FROM k
	WHERE p.endpoint = k.endpoint AND p.ordering_key = k.ordering_key AND p.next_attempt_at = 'infinity'
	  AND NOT EXISTS (SELECT 1 FROM hookbridge.delivery_pending q
	                  WHERE q.endpoint = p.endpoint AND q.ordering_key = p.ordering_key AND q.stream_seq < p.stream_seq)
	RETURNING p.endpoint
)
SELECT e.endpoint, pg_notify('hookbridge_delivery', e.endpoint)::text
FROM (SELECT DISTINCT endpoint FROM promoted) e
