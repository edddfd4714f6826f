-- A later event of the dead letter's ordering key has been applied: the
-- first one to do so is recorded (the key has moved on past it).
UPDATE hookbridge.dead_letters
SET passed_at = now(), passed_by_event = $5, passed_by_seq = $6
WHERE consumer = $1 AND source = $2 AND event_id = $3 AND stream_seq = $4
  AND passed_at IS NULL
