-- A message id is a row's, or falls in the block of 1024 ids of the pack
-- whose first_id is at most 1023 below it.
SELECT id, event_id, subject, status, coalesce(stream_seq, 0)
FROM hookbridge.outbox_rows WHERE id = $1
UNION ALL
SELECT p.first_id + m.ord - 1, m.event_id, m.subject,
       CASE WHEN p.sent_at IS NULL THEN 'pending' ELSE 'sent' END, coalesce(p.stream_seqs[m.ord], 0)
FROM hookbridge.outbox_packs p
CROSS JOIN LATERAL unnest(p.event_ids, p.subjects) WITH ORDINALITY AS m(event_id, subject, ord)
WHERE p.first_id > $1 - 1024 AND p.first_id <= $1 AND p.first_id + m.ord - 1 = $1
LIMIT 1
