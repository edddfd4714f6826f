SELECT ceil(extract(epoch FROM min(next_attempt_at) - now()) * 1000)::bigint
FROM hookbridge.outbox_rows
WHERE status = 'pending' AND next_attempt_at > now()
