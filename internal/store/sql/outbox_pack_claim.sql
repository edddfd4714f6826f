-- Pending packs in key_seq order, skipping packs other relays hold,
-- until they carry $1 messages (hookbridge.outbox_claim_packs, 0009).
SELECT first_id, key_seq, created_at, event_ids, subjects, keys, headers, payloads
FROM hookbridge.outbox_claim_packs($1)
