INSERT INTO hookbridge.outbox (event_id, subject, headers, payload, ordering_key)
VALUES ($1, $2, $3::jsonb, $4, $5)
ON CONFLICT DO NOTHING
