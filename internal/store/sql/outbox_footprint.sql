-- Both tables' size with their indexes and TOAST, and the messages they
-- hold.
SELECT pg_total_relation_size('hookbridge.outbox_rows'::regclass) + pg_total_relation_size('hookbridge.outbox_packs'::regclass),
       (SELECT count(*) FROM hookbridge.outbox_rows) + (SELECT coalesce(sum(n), 0) FROM hookbridge.outbox_packs)
