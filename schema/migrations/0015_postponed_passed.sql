-- A postponed event lets the later events of its ordering key apply
-- before it. If it then becomes a dead letter (postponed past
-- postpone_limit, or failing since), that dead letter is written after
-- those later events committed, yet it must start marked passed like any
-- dead letter a later event applied past, or a requeue would apply it out
-- of order without being told to. So a postponed event's row here
-- records its key, and the later event that applies past it marks the row
-- in its own transaction, as it marks the dead letters it passes; the
-- dead letter takes the mark over from the row it replaces.
ALTER TABLE hookbridge.delivery_failures
	ADD COLUMN ordering_key    text,
	ADD COLUMN passed_at       timestamptz,
	ADD COLUMN passed_by_event text,
	ADD COLUMN passed_by_seq   bigint;

-- The rows a later event of their key may pass: the apply of every keyed
-- event probes it in its own transaction (failure_mark_passed_by.sql), so
-- it holds only the postponed events not passed yet.
CREATE INDEX delivery_failures_unpassed ON hookbridge.delivery_failures (consumer, source, ordering_key, stream_seq)
	WHERE ordering_key IS NOT NULL AND passed_at IS NULL;
