SELECT consumer, count(*) FROM hookbridge.delivery_failures GROUP BY consumer
