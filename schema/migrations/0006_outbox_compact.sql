-- Smaller outbox rows and indexes. Every outbox row is inserted, updated
-- once when sent (a non-HOT update: status is in the partial indexes'
-- predicates, so the sent version gets new entries in every index whose
-- predicate it still matches) and kept until retention deletes it, so
-- every byte of a row and of its index entries is paid about twice until
-- vacuum, for every event. See docs/OUTBOX.md ("Size") for the figures.

-- Uniqueness of event_id through a hash index: an entry holds a 4-byte
-- hash instead of the whole id (up to 255 bytes, typically 30 to 60), and
-- the exclusion check compares the ids themselves, so it is exact.
-- Hash entries also land all over the index, so space vacuum frees is
-- reused, where B-tree pages of ever-growing ids stay half empty.
-- Enqueue uses ON CONFLICT DO NOTHING without a target, which exclusion
-- constraints arbitrate like unique ones (waiting for a concurrent
-- writer of the same id).
ALTER TABLE hookbridge.outbox DROP CONSTRAINT outbox_event_id_key;
ALTER TABLE hookbridge.outbox ADD CONSTRAINT outbox_event_id_excl EXCLUDE USING hash (event_id WITH =);

-- Retention walks the primary key from the oldest id instead (ids follow
-- creation time, and a row is sent after it is created), and the sent
-- count is the total minus pending and dead. This index held an entry
-- for every sent row, i.e. nearly every row.
DROP INDEX hookbridge.outbox_sent_at_idx;

-- No headers is NULL rather than an empty JSON object. Existing rows keep
-- theirs (rewriting them all here would hold the table for long); the
-- relay reads both the same way.
ALTER TABLE hookbridge.outbox ALTER COLUMN headers DROP NOT NULL, ALTER COLUMN headers DROP DEFAULT;

-- The dead version every sent row leaves behind is space new rows can
-- reuse once vacuumed. The default (a vacuum after 20% of the table has
-- changed) lets a large outbox carry a fifth of its size in dead rows and
-- grow instead of reusing space; vacuum at 2% instead. Vacuum skips heap
-- pages that are already all-visible (most of a queue table); it does
-- read every index, one more reason to keep them few and small.
ALTER TABLE hookbridge.outbox SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.05
);
