-- The outbox's size on disk (every table with its indexes and TOAST) and
-- the messages it holds, for a schema of any version: the table before
-- migration 0009, the tables of rows and packs from it on.
SELECT coalesce(pg_total_relation_size(to_regclass('hookbridge.outbox_rows')), 0)
     + coalesce(pg_total_relation_size(to_regclass('hookbridge.outbox_packs')), 0)
     + CASE WHEN to_regclass('hookbridge.outbox_rows') IS NULL THEN pg_total_relation_size('hookbridge.outbox') ELSE 0 END,
       (SELECT count(*) FROM hookbridge.outbox)
