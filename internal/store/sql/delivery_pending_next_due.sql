-- Milliseconds until the endpoint's next delivery that is not due yet
-- becomes due (NULL: none; parked rows never are by themselves).
SELECT (extract(epoch FROM min(next_attempt_at) - now()) * 1000)::bigint
FROM hookbridge.delivery_pending
WHERE endpoint = $1 AND next_attempt_at > now() AND next_attempt_at < 'infinity'
