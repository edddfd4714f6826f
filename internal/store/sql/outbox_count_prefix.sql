SELECT (SELECT count(*) FROM hookbridge.outbox_rows WHERE starts_with(event_id, $1))
     + (SELECT count(*) FROM hookbridge.outbox_packs p CROSS JOIN LATERAL unnest(p.event_ids) AS e
        WHERE starts_with(e, $1))
