-- Messages of packs the relay could not publish whole become rows, each
-- with its outcome: sent (kept with its sequence), failed (its attempt
-- counted, dead or due after delay_us), or pending and due now (left
-- behind their key; the deferral queued after this may move them). They
-- keep their id, key_seq and creation time.
INSERT INTO hookbridge.outbox_rows (id, event_id, subject, headers, payload, ordering_key, key_seq, created_at,
                                    status, attempts, last_error, next_attempt_at, sent_at, stream_seq)
OVERRIDING SYSTEM VALUE
SELECT u.id, u.event_id, u.subject, u.header::jsonb, u.payload, u.key, u.key_seq, u.created_at,
       u.status, u.attempts, u.err, clock_timestamp() + u.delay_us * interval '1 microsecond',
       CASE WHEN u.status = 'sent' THEN clock_timestamp() END, u.seq
FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::text[], $7::bigint[],
            $8::timestamptz[], $9::text[], $10::int[], $11::text[], $12::bigint[], $13::bigint[])
     AS u(id, event_id, subject, header, payload, key, key_seq, created_at, status, attempts, err, delay_us, seq)
