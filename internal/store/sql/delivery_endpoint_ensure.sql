-- The configured endpoints get a row each (enabled, nobody reading); an
-- existing row keeps its state.
INSERT INTO hookbridge.delivery_endpoints (name)
SELECT unnest($1::text[])
ON CONFLICT (name) DO NOTHING
