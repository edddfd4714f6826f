UPDATE hookbridge.outbox_rows o
SET attempts = o.attempts + CASE WHEN u.counted THEN 1 ELSE 0 END,
    last_error = u.err,
    status = CASE WHEN u.permanent OR (u.counted AND o.attempts + 1 >= $5) THEN 'dead' ELSE 'pending' END,
    next_attempt_at = clock_timestamp() + u.delay_us * interval '1 microsecond'
FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bool[], $6::bool[]) AS u(id, err, delay_us, permanent, counted)
WHERE o.id = u.id
