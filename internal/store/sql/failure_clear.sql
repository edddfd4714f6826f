-- $1 consumer, $2 source, $3 event id, $4 stream sequence.
DELETE FROM hookbridge.delivery_failures
WHERE consumer = $1 AND source = $2 AND event_id = $3 AND stream_seq = $4
