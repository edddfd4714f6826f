-- What a requeue of a dead letter sends: its body and headers (NULL body:
-- a row written before bodies were kept; the body is then read from
-- EVENTS).
SELECT payload, headers FROM hookbridge.delivery_dead_letters WHERE id = $1
