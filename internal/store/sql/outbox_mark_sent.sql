UPDATE hookbridge.outbox_rows o
SET status = 'sent', sent_at = clock_timestamp(), stream_seq = u.seq
FROM unnest($1::bigint[], $2::bigint[]) AS u(id, seq)
WHERE o.id = u.id
