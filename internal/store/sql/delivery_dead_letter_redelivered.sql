-- A requeue's delivery succeeded.
UPDATE hookbridge.delivery_dead_letters SET redelivered_at = now() WHERE id = $1
