-- Marks packs sent: pack $1[i]'s stream sequences are $2[$3[i]:$4[i]]
-- (one flat array for all packs). Only the last two columns change.
UPDATE hookbridge.outbox_packs p
SET sent_at = clock_timestamp(), stream_seqs = ($2::bigint[])[u.lo:u.hi]
FROM unnest($1::bigint[], $3::int[], $4::int[]) AS u(first_id, lo, hi)
WHERE p.first_id = u.first_id
