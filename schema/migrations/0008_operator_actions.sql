-- Operator actions (the admin API and the CLI): a dead letter can be
-- discarded with a reason and stays in the table, marked; a conflict can
-- be resolved. Neither row is ever deleted by these actions, so the
-- history of what went wrong, and what was done about it, is kept.

-- Why an operator resolved a dead letter by hand ("discarded" rows);
-- NULL for rows a replay or a requeue resolved.
ALTER TABLE hookbridge.dead_letters ADD COLUMN resolution_note text;

-- A conflict is resolved once someone has looked at both bodies and
-- decided; resolution says what they decided.
ALTER TABLE hookbridge.conflicts
    ADD COLUMN resolved_at timestamptz,
    ADD COLUMN resolution  text;

-- The console and status count the unresolved conflicts; they are few.
CREATE INDEX conflicts_unresolved_idx ON hookbridge.conflicts (id) WHERE resolved_at IS NULL;
