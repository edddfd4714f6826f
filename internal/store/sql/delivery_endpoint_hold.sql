-- Locks the endpoint's row for the rest of the transaction when this
-- instance ($2) holds its lease: a write made after it is seen by the
-- next owner, whose claim waits for the lock.
SELECT 1 FROM hookbridge.delivery_endpoints
WHERE name = $1 AND owner = $2 AND lease_until > now()
FOR SHARE
