-- Pending messages through the outbox view (the table itself before
-- migration 0009): the load tool waits for a server of either version.
SELECT count(*) FROM hookbridge.outbox WHERE status = 'pending'
