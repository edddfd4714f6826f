-- Ordered consumption (docs/DESIGN.md, "Order"). A dead letter of a keyed
-- event records its ordering key, and, once a later event of the same key
-- has been applied, which one went past it and when: requeueing it then
-- would apply an older event after a newer one, which the operator must
-- choose knowingly.
ALTER TABLE hookbridge.dead_letters
    ADD COLUMN ordering_key      text,
    ADD COLUMN passed_at         timestamptz,
    ADD COLUMN passed_by_event   text,
    ADD COLUMN passed_by_seq     bigint;
