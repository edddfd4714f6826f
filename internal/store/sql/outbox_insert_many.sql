-- ORDER BY ord: rows are inserted, and draw their identity and key_seq,
-- in slice order, as consecutive single inserts would.
INSERT INTO hookbridge.outbox (event_id, subject, headers, payload, ordering_key)
SELECT u.event_id, u.subject, u.headers::jsonb, u.payload, u.ordering_key
FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::text[])
     WITH ORDINALITY AS u(event_id, subject, headers, payload, ordering_key, ord)
ORDER BY u.ord
ON CONFLICT DO NOTHING
RETURNING event_id
