-- A statement of its own, after the claim: in READ COMMITTED it sees a row
-- that a racing delivery committed while the claim waited for it, which
-- the claim's own snapshot does not.
SELECT i.source, i.event_id, i.body_sha256, i.stream_seq
FROM unnest($2::text[], $3::text[]) AS k(source, event_id)
JOIN hookbridge.inbox i ON i.consumer = $1 AND i.source = k.source AND i.event_id = k.event_id
