-- Renews this instance's ($1) leases on the endpoints it should read ($2)
-- and takes those nobody holds or whose lease ran out; returns the
-- endpoints it holds now and their state. An endpoint another instance
-- still holds stays with it (it lets go when it sees the new share).
UPDATE hookbridge.delivery_endpoints
SET owner = $1, lease_until = now() + make_interval(secs => $3)
WHERE name = ANY($2) AND (owner = $1 OR owner IS NULL OR lease_until < now())
RETURNING name, state
