-- An instance that stops leaves; rows of instances gone for a day go too.
DELETE FROM hookbridge.delivery_instances
WHERE id = $1 OR seen_at < now() - interval '1 day'
