SELECT pg_total_relation_size('hookbridge.inbox'::regclass), (SELECT count(*) FROM hookbridge.inbox)
