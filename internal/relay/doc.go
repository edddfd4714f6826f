// Package relay publishes the outbox: it claims committed rows that
// publisher.Enqueue wrote, publishes each to the EVENTS stream with its
// event id as Nats-Msg-Id (in order per ordering key), retries failures
// with backoff and deletes sent rows after their retention.
package relay
