-- Marks packs sent: pack $1[i]'s stream sequences are $2[$3[i]:$4[i]]
-- (one flat array for all packs). Only the last two columns change. The
-- packs are found by primary key, never by joining the arrays, so the
-- plan cannot turn into a scan of every kept pack.
UPDATE hookbridge.outbox_packs p
SET sent_at = clock_timestamp(),
    stream_seqs = ($2::bigint[])[($3::int[])[array_position($1::bigint[], p.first_id)]
                                 : ($4::int[])[array_position($1::bigint[], p.first_id)]]
WHERE p.first_id = ANY ($1::bigint[])
