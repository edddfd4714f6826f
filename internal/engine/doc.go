// Package engine is the consumer engine: it pulls webhooks from the HOOKS
// stream (or, for sources with an ordering key, takes its share of the
// partitions of a consumer group), applies them in batches with the
// handlers of the public handler API, each batch in one transaction that
// claims the events in the inbox set-wise, and acks after the commit.
// Retries with backoff, dead letters, conflicts and replay are here too.
package engine
