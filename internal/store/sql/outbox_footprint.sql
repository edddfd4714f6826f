SELECT pg_total_relation_size('hookbridge.outbox'::regclass), (SELECT count(*) FROM hookbridge.outbox)
