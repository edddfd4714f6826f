-- Per consumer, the messages failing right now and those postponed by
-- their handler (postponed_since set: their last attempt postponed), as
-- FailureList splits them.
SELECT consumer,
       count(*) FILTER (WHERE postponed_since IS NULL),
       count(*) FILTER (WHERE postponed_since IS NOT NULL)
FROM hookbridge.delivery_failures
GROUP BY consumer
