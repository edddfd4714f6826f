-- Takes the ordering keys' outbox locks, sorted (migration 0013), before
-- a write of more messages than one statement holds.
SELECT hookbridge.outbox_lock_keys($1::text[])
