-- The delivery instances seen within the last $1 seconds, and the
-- endpoints each has.
SELECT id, endpoints FROM hookbridge.delivery_instances
WHERE seen_at > now() - make_interval(secs => $1)
ORDER BY id
