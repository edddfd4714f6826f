UPDATE hookbridge.outbox o
SET attempts = o.attempts + 1,
    last_error = u.err,
    status = CASE WHEN u.permanent OR o.attempts + 1 >= $5 THEN 'dead' ELSE 'pending' END,
    next_attempt_at = clock_timestamp() + u.delay_us * interval '1 microsecond'
FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bool[]) AS u(id, err, delay_us, permanent)
WHERE o.id = u.id
