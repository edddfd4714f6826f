SELECT id, event_id, subject, coalesce(headers::text, ''), payload, ordering_key, key_seq, attempts, next_attempt_at
FROM hookbridge.outbox_rows
WHERE id = ANY($1) AND status = 'pending' AND next_attempt_at <= now()
FOR UPDATE SKIP LOCKED
