-- Which of the given messages ($2 sources, $3 event ids, $4 stream
-- sequences, pairwise) the consumer dead-lettered, resolved since or not:
-- a dead-lettered message was terminated, so no member holds it (a
-- takeover reads this). The unique key serves each probe.
SELECT d.stream_seq
FROM unnest($2::text[], $3::text[], $4::bigint[]) AS u(source, event_id, stream_seq)
JOIN hookbridge.dead_letters d
  ON d.consumer = $1 AND d.source = u.source AND d.event_id = u.event_id AND d.stream_seq = u.stream_seq
