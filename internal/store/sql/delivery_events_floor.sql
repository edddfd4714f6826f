-- The lowest EVENTS sequence a delivery Postgres tracks still reads from
-- EVENTS (NULL: none): every pending delivery but a requeue whose dead
-- letter has its own copy of the body. The storage guard trims EVENTS
-- only below it.
SELECT min(p.stream_seq)
FROM hookbridge.delivery_pending p
LEFT JOIN hookbridge.delivery_dead_letters d ON d.id = p.dead_letter_id
WHERE d.payload IS NULL
