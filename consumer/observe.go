package consumer

import "time"

// OutcomeDeadLettered is the outcome an [Observer] is told for a message
// recorded in hookbridge.dead_letters and terminated.
const OutcomeDeadLettered = "dead_lettered"

// Observer is told what a consumer does (metrics). Its methods are called
// from the apply workers: they must be quick and safe for concurrent use.
type Observer interface {
	// ObserveBatch reports one apply transaction: how many events it
	// held and how long it took (claims, handlers, commit).
	ObserveBatch(consumer string, size int, elapsed time.Duration)
	// ObserveOutcome reports one message's outcome: an [Outcome]'s String
	// (processed, duplicate, conflict, failed: rolled back, to be retried
	// or dead-lettered) or [OutcomeDeadLettered].
	ObserveOutcome(consumer, outcome string)
}

func (c *Consumer) observeBatch(size int, elapsed time.Duration) {
	if c.opts.Observer != nil {
		c.opts.Observer.ObserveBatch(c.opts.Name, size, elapsed)
	}
}

func (c *Consumer) observeOutcome(outcome string) {
	if c.opts.Observer != nil {
		c.opts.Observer.ObserveOutcome(c.opts.Name, outcome)
	}
}
