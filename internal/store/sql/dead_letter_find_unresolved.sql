-- Which of the given messages ($2 sources, $3 event ids, $4 stream
-- sequences, pairwise) have an unresolved dead letter of the consumer: a
-- redelivery of such a message (its Term lost, or a member cut off from
-- NATS dead-lettered it) is settled, never applied. Another message with
-- the same event id is not matched: it is a repeat or a conflict, judged
-- by the inbox. The unique key serves each probe.
SELECT d.stream_seq
FROM unnest($2::text[], $3::text[], $4::bigint[]) AS u(source, event_id, stream_seq)
JOIN hookbridge.dead_letters d
  ON d.consumer = $1 AND d.source = u.source AND d.event_id = u.event_id AND d.stream_seq = u.stream_seq
 AND d.resolved_at IS NULL
