-- The delivery instances seen within the last $1 seconds.
SELECT id FROM hookbridge.delivery_instances
WHERE seen_at > now() - make_interval(secs => $1)
ORDER BY id
