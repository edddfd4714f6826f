-- This instance ($1) lets go of endpoints ($2): the instance whose share
-- they are takes them at once (the notification wakes it).
WITH released AS (
	UPDATE hookbridge.delivery_endpoints
	SET owner = NULL, lease_until = NULL
	WHERE owner = $1 AND name = ANY($2)
	RETURNING name
)
SELECT name, pg_notify('hookbridge_delivery', name) FROM released
