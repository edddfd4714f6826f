-- The messages postponed right now per consumer: their handler waits for a
-- later event of their ordering key (postponed_since is set). They are
-- among the rows failure_count_by_consumer counts, and are shown apart:
-- a postponement is not a failure.
SELECT consumer, count(*) FROM hookbridge.delivery_failures WHERE postponed_since IS NOT NULL GROUP BY consumer
