-- Whether endpoint $1 has a dead letter of the event $3 at stream
-- sequence $2, resolved or not: the event's schedule ended there.
SELECT EXISTS (SELECT 1 FROM hookbridge.delivery_dead_letters
               WHERE endpoint = $1 AND stream_seq = $2 AND event_id = $3)
