-- Enqueue's write of n messages (parallel arrays; headers and keys NULL
-- when no message has one): one pack when the transaction owns every id,
-- else one row each (hookbridge.outbox_write, migration 0009). Returns
-- the ids written; the others were in the outbox already.
SELECT hookbridge.outbox_write($1::text[], $2::text[], $3::text[], $4::bytea[], $5::text[])
