-- Through the view of rows and packs (0009), which before 0009 was the
-- table itself: the load tool counts what a running server of either
-- version wrote.
SELECT count(*) FROM hookbridge.outbox WHERE starts_with(event_id, $1)
