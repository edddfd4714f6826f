-- Enables or disables an endpoint and tells every instance (the
-- notification); enabling clears the failing clock. No row changes when
-- it is in that state already.
WITH changed AS (
	UPDATE hookbridge.delivery_endpoints
	SET state = $2, disabled_reason = $3, state_changed_at = now(),
	    failing_since = CASE WHEN $2 = 'enabled' THEN NULL ELSE failing_since END
	WHERE name = $1 AND state <> $2
	RETURNING name
)
SELECT name, pg_notify('hookbridge_delivery', name) FROM changed
