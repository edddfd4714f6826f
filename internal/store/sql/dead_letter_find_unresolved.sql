-- Which of the given events ($2 sources, $3 event ids, pairwise) have an
-- unresolved dead letter of the consumer: a redelivery of such an event
-- (its Term lost, or a member cut off from NATS dead-lettered it) is
-- settled, never applied. The unique key serves each probe.
SELECT d.source, d.event_id
FROM unnest($2::text[], $3::text[]) AS u(source, event_id)
JOIN hookbridge.dead_letters d
  ON d.consumer = $1 AND d.source = u.source AND d.event_id = u.event_id AND d.resolved_at IS NULL
