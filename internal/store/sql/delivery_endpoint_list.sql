-- Every endpoint's shared state, by name.
SELECT name, state, failing_since, state_changed_at, disabled_reason, COALESCE(owner, ''),
	lease_until, COALESCE(lease_until > now(), false)
FROM hookbridge.delivery_endpoints
ORDER BY name
