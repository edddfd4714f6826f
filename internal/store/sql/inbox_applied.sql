-- A join against the ids keeps the plan a primary-key lookup per id
-- whatever the table's statistics say.
SELECT i.event_id FROM unnest($3::text[]) AS u(id)
JOIN hookbridge.inbox i ON i.consumer = $1 AND i.source = $2 AND i.event_id = u.id
