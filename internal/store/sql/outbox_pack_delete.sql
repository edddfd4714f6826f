DELETE FROM hookbridge.outbox_packs WHERE first_id = ANY ($1)
