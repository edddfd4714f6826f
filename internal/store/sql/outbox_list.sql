-- Every outbox message in insertion order, for tests and the self-test
-- that assert what handlers enqueued (hookbridgetest, selftest): the
-- view of rows and packs (migration 0009).
SELECT event_id, subject, COALESCE(headers::text, '{}'), payload, COALESCE(ordering_key, ''), status, stream_seq
FROM hookbridge.outbox
WHERE starts_with(event_id, $1)
ORDER BY id
