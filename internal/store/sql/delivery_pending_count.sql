-- Deliveries Postgres tracks per endpoint: failing or parked, requeued,
-- replayed.
SELECT endpoint, count(*), count(*) FILTER (WHERE attempts > 0), min(created_at)
FROM hookbridge.delivery_pending
GROUP BY endpoint
ORDER BY endpoint
