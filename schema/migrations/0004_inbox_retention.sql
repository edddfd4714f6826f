-- Inbox retention deletes rows by age. applied_at grows with insertion
-- order, so a BRIN index finds old rows at almost no cost to the hot
-- insert path (a B-tree here would add a page write to every apply).
CREATE INDEX inbox_applied_at_brin ON hookbridge.inbox USING brin (applied_at);
