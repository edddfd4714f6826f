-- An endpoint that no longer keeps order per key: the events parked
-- behind an earlier one of their key become due.
UPDATE hookbridge.delivery_pending
SET next_attempt_at = now()
WHERE endpoint = $1 AND next_attempt_at = 'infinity'
