package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultScrapeTimeout bounds each scrape-time lookup (JetStream consumer
// info, outbox SQL), so a slow dependency cannot hang /metrics.
const DefaultScrapeTimeout = 2 * time.Second

// ConsumerState is what JetStream reports about one durable consumer.
type ConsumerState struct {
	// Pending is how many stream messages match the consumer's filter and
	// were not delivered yet (its backlog).
	Pending uint64
	// AckPending is how many were delivered and not acked yet.
	AckPending int
	// Redelivered is how many of those were delivered more than once.
	Redelivered int
	// OldestUnacked is the age of the oldest message in HOOKS the
	// consumer has not acked (applied or dead-lettered) yet, 0 when there
	// is none: the oldest, over the consumer's durables with work, of the
	// first message on each durable's own subjects past its ack floor.
	// HOOKS keeps every message the consumer has not
	// acked, so a consumer far behind fills it: alert well before
	// streams.max_bytes is reached.
	OldestUnacked time.Duration
	// Paused says whether an operator paused the consumer.
	Paused bool
	// Keyed says the consumer reads keyed messages through partition
	// durables: then the counts above include its partitions', and
	// Partitions and Members describe them ([PartitionState], [MemberState]).
	Keyed      bool
	Partitions []PartitionState
	Members    []MemberState
}

// ConsumerInfo looks up one durable consumer's state.
type ConsumerInfo func(ctx context.Context, name string) (ConsumerState, error)

var (
	descConsumerPending = prometheus.NewDesc(Namespace+"_consumer_pending_messages",
		"Messages in HOOKS that match the consumer and were not delivered yet (JetStream num_pending).", []string{"consumer"}, nil)
	descConsumerAckPending = prometheus.NewDesc(Namespace+"_consumer_ack_pending_messages",
		"Messages delivered to the consumer and not acked yet (JetStream num_ack_pending).", []string{"consumer"}, nil)
	descConsumerRedelivered = prometheus.NewDesc(Namespace+"_consumer_redelivered_messages",
		"Unacked messages delivered more than once (JetStream num_redelivered).", []string{"consumer"}, nil)
	descConsumerOldest = prometheus.NewDesc(Namespace+"_consumer_oldest_unacked_age_seconds",
		"Age of the oldest HOOKS message the consumer has not acked yet (0 when none); HOOKS keeps it, and every later one, until the consumer has applied it.", []string{"consumer"}, nil)
	descConsumerUp = prometheus.NewDesc(Namespace+"_consumer_info_up",
		"1 if the consumer's JetStream info could be read at this scrape, else 0.", []string{"consumer"}, nil)
	descConsumerPaused = prometheus.NewDesc(Namespace+"_consumer_paused",
		"1 while an operator has paused the consumer (its messages wait in HOOKS), else 0.", []string{"consumer"}, nil)
)

// consumerCollector reads JetStream consumer info at scrape time.
type consumerCollector struct {
	names   []string
	info    ConsumerInfo
	timeout time.Duration
}

// NewConsumerCollector returns a collector that reports pending, ack
// pending and redelivered messages of each named durable consumer, looked
// up with info when Prometheus scrapes (each lookup bounded by timeout;
// 0 = [DefaultScrapeTimeout]), and of a keyed consumer its partitions and
// members, labelled by the consumer (never by a partition durable's name).
func NewConsumerCollector(names []string, info ConsumerInfo, timeout time.Duration) prometheus.Collector {
	if timeout <= 0 {
		timeout = DefaultScrapeTimeout
	}
	return &consumerCollector{names: append([]string(nil), names...), info: info, timeout: timeout}
}

func (c *consumerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descConsumerPending
	ch <- descConsumerAckPending
	ch <- descConsumerRedelivered
	ch <- descConsumerOldest
	ch <- descConsumerUp
	ch <- descConsumerPaused
	describeKeyed(ch)
}

func (c *consumerCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	for _, name := range c.names {
		st, err := c.info(ctx, name)
		if err != nil {
			ch <- prometheus.MustNewConstMetric(descConsumerUp, prometheus.GaugeValue, 0, name)
			continue
		}
		ch <- prometheus.MustNewConstMetric(descConsumerUp, prometheus.GaugeValue, 1, name)
		ch <- prometheus.MustNewConstMetric(descConsumerPending, prometheus.GaugeValue, float64(st.Pending), name)
		ch <- prometheus.MustNewConstMetric(descConsumerAckPending, prometheus.GaugeValue, float64(st.AckPending), name)
		ch <- prometheus.MustNewConstMetric(descConsumerRedelivered, prometheus.GaugeValue, float64(st.Redelivered), name)
		ch <- prometheus.MustNewConstMetric(descConsumerOldest, prometheus.GaugeValue, st.OldestUnacked.Seconds(), name)
		ch <- prometheus.MustNewConstMetric(descConsumerPaused, prometheus.GaugeValue, boolValue(st.Paused), name)
		if st.Keyed {
			collectKeyed(ch, name, st)
		}
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// DatabaseState is the outbox and dead-letter state read from Postgres.
type DatabaseState struct {
	OutboxPending int64
	OutboxDead    int64
	OutboxSent    int64
	// OldestPending is the age of the oldest pending outbox row (0: none).
	OldestPending time.Duration
	// DeadLetters counts unresolved dead letters by consumer.
	DeadLetters map[string]int64
}

// DatabaseStats reads [DatabaseState].
type DatabaseStats func(ctx context.Context) (DatabaseState, error)

var (
	descOutboxPending = prometheus.NewDesc(Namespace+"_outbox_pending_rows",
		"Outbox rows waiting to be published (including rows backing off after a failure).", nil, nil)
	descOutboxOldest = prometheus.NewDesc(Namespace+"_outbox_oldest_pending_age_seconds",
		"Age of the oldest pending outbox row: how far behind the relays are (0 when none is pending).", nil, nil)
	descOutboxDead = prometheus.NewDesc(Namespace+"_outbox_dead_rows",
		"Outbox rows the relay gave up on (max attempts or malformed); they need an operator.", nil, nil)
	descOutboxSent = prometheus.NewDesc(Namespace+"_outbox_sent_rows",
		"Published outbox rows not yet deleted by retention.", nil, nil)
	descDeadLetters = prometheus.NewDesc(Namespace+"_dead_letters_unresolved",
		"Unresolved rows in hookbridge.dead_letters, by consumer.", []string{"consumer"}, nil)
	descDatabaseUp = prometheus.NewDesc(Namespace+"_database_stats_up",
		"1 if the outbox and dead-letter statistics could be read from Postgres at this scrape, else 0.", nil, nil)
)

type databaseCollector struct {
	stats   DatabaseStats
	timeout time.Duration
}

// NewDatabaseCollector returns a collector that reads the outbox and
// dead-letter counts with stats when Prometheus scrapes, bounded by
// timeout (0 = [DefaultScrapeTimeout]).
func NewDatabaseCollector(stats DatabaseStats, timeout time.Duration) prometheus.Collector {
	if timeout <= 0 {
		timeout = DefaultScrapeTimeout
	}
	return &databaseCollector{stats: stats, timeout: timeout}
}

func (c *databaseCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descOutboxPending
	ch <- descOutboxOldest
	ch <- descOutboxDead
	ch <- descOutboxSent
	ch <- descDeadLetters
	ch <- descDatabaseUp
}

func (c *databaseCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	st, err := c.stats(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(descDatabaseUp, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(descDatabaseUp, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(descOutboxPending, prometheus.GaugeValue, float64(st.OutboxPending))
	ch <- prometheus.MustNewConstMetric(descOutboxOldest, prometheus.GaugeValue, st.OldestPending.Seconds())
	ch <- prometheus.MustNewConstMetric(descOutboxDead, prometheus.GaugeValue, float64(st.OutboxDead))
	ch <- prometheus.MustNewConstMetric(descOutboxSent, prometheus.GaugeValue, float64(st.OutboxSent))
	for consumer, n := range st.DeadLetters {
		ch <- prometheus.MustNewConstMetric(descDeadLetters, prometheus.GaugeValue, float64(n), consumer)
	}
}
