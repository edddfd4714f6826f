-- The messages failing right now ($1 false) or postponed by their handler
-- ($1 true: postponed_since is set, so their last attempt postponed,
-- failures before or not), the most recent first; the table holds only
-- unsettled messages, so it stays small.
SELECT consumer, source, event_id, stream_seq, failures, last_error, updated_at, postponed_since
FROM hookbridge.delivery_failures
WHERE (postponed_since IS NOT NULL) = $1
ORDER BY updated_at DESC, consumer, source, event_id
LIMIT $2
