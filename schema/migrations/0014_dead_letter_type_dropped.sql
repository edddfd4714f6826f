-- A consumer whose configuration drops an event type (for one declared in
-- SQL: the type's apply statement is removed) still applies the events of
-- that type stored before the change. A handler with no code for the type
-- refuses them; they become dead letters with a reason of their own, so
-- that an operator sees why and can restore the type and requeue them.
ALTER TABLE hookbridge.dead_letters DROP CONSTRAINT dead_letters_reason_check;
ALTER TABLE hookbridge.dead_letters ADD CONSTRAINT dead_letters_reason_check
	CHECK (reason IN ('max_deliver', 'permanent', 'unusable', 'postponed', 'type_dropped'));
