// Package metrics holds hookbridge's Prometheus metrics and the observer
// API the ingress, the consumers and the relay report through.
//
// Each [Registry] has its own prometheus.Registry: nothing is registered
// with the client library's global default registry, so several servers
// (tests, or two roles in one process) never share or collide on state.
// Counters and histograms are updated as things happen; gauges that
// describe state held elsewhere (JetStream consumer info, outbox rows) are
// read at scrape time by collectors bounded by a timeout.
package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every hookbridge metric.
const Namespace = "hookbridge"

// UnknownSource is the source label of requests for a source that is not
// configured: the label set stays bounded whatever paths clients try.
const UnknownSource = "_unknown"

// Registry is one process's metrics.
type Registry struct {
	reg *prometheus.Registry

	ingressRequests *prometheus.CounterVec
	verifyFailures  *prometheus.CounterVec
	ingressPublish  *prometheus.HistogramVec
	ingressUnkeyed  *prometheus.CounterVec

	consumerEvents *prometheus.CounterVec
	applySeconds   *prometheus.HistogramVec
	batchSize      *prometheus.HistogramVec

	relayPublish *prometheus.HistogramVec
	relayRows    *prometheus.CounterVec

	streamBytes    *prometheus.GaugeVec
	streamMaxBytes *prometheus.GaugeVec
	streamFull     *prometheus.GaugeVec
	hooksTrimmed   prometheus.Counter
	orphans        *prometheus.GaugeVec
}

// latencyBuckets span a fast local publish or commit (≈1 ms) to a
// timeout (10 s and more).
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// batchSizeBuckets are powers of two from 1 to 1024, the largest batch a
// consumer takes ([engine.MaxBatch]; the default is [engine.DefaultBatchSize], 256): with the old
// top bucket of 64, every batch at the defaults fell into +Inf.
var batchSizeBuckets = prometheus.ExponentialBuckets(1, 2, 11)

// New returns a registry with every hookbridge metric plus the Go runtime
// and process collectors.
func New() *Registry {
	r := &Registry{reg: prometheus.NewRegistry()}
	r.ingressRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: "ingress", Name: "requests_total",
		Help: "Webhook requests answered by the ingress, by source and HTTP status code.",
	}, []string{"source", "status"})
	r.verifyFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: "ingress", Name: "verification_failures_total",
		Help: "Webhook requests refused because the signature did not verify, by source and reason (missing, malformed, mismatch, stale, other).",
	}, []string{"source", "reason"})
	r.ingressPublish = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Subsystem: "ingress", Name: "publish_seconds",
		Help:    "Time from the ingress's publish to HOOKS until JetStream's PubAck, every retry included, by result (stored, duplicate, error).",
		Buckets: latencyBuckets,
	}, []string{"result"})
	r.ingressUnkeyed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: "ingress", Name: "unkeyed_total",
		Help: "Accepted deliveries of a source with an ordering key that carried no key it could read, published without order, by source and reason (absent: the header or pointer names nothing; unreadable: the key is read from the body and the body is not JSON). A steady count of absent usually means a wrong ordering_key pointer or header; unreadable, a sender in another format (Shopify XML): set ordering_key to a header or none.",
	}, []string{"source", "reason"})
	r.consumerEvents = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: "consumer", Name: "events_total",
		Help: "Messages handled by each consumer, by outcome: processed, duplicate, conflict, postponed (the handler waits for a later event of its key), failed (rolled back, will be retried or dead-lettered), dead_lettered.",
	}, []string{"consumer", "outcome"})
	r.applySeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Subsystem: "consumer", Name: "apply_seconds",
		Help:    "Duration of one apply transaction (a batch of events: inbox claims, handlers, commit).",
		Buckets: latencyBuckets,
	}, []string{"consumer"})
	r.batchSize = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Subsystem: "consumer", Name: "batch_size",
		Help:    "Events applied per transaction.",
		Buckets: batchSizeBuckets,
	}, []string{"consumer"})
	r.relayPublish = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Subsystem: "relay", Name: "publish_seconds",
		Help:    "Time the relay took to publish one claimed batch of outbox rows and receive their PubAcks.",
		Buckets: latencyBuckets,
	}, []string{})
	r.relayRows = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: "relay", Name: "rows_total",
		Help: "Outbox rows the relay tried to publish, by result: sent (PubAck received) or failed (rescheduled or dead).",
	}, []string{"result"})

	r.streamBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Subsystem: "stream", Name: "bytes",
		Help: "Bytes stored in each hookbridge stream, as of the last storage check.",
	}, []string{"stream"})
	r.streamMaxBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Subsystem: "stream", Name: "max_bytes",
		Help: "The stream's byte limit (streams.max_bytes; -1 = unlimited).",
	}, []string{"stream"})
	r.streamFull = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Subsystem: "stream", Name: "full",
		Help: "1 while the stream refuses new messages (a limit reached, or the server's store full), else 0.",
	}, []string{"stream"})
	r.hooksTrimmed = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: "stream", Name: "hooks_trimmed_messages_total",
		Help: "HOOKS messages purged, to make room or older than streams.max_age, all of them applied, dead-lettered or never to be received by every consumer.",
	})
	r.orphans = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Subsystem: "stream", Name: "hooks_orphaned_durables",
		Help: "1 for each durable on HOOKS that no configured consumer owns, as of the last storage check: it keeps every message it has not acked in HOOKS (hookbridge consumers delete NAME).",
	}, []string{"durable"})

	r.reg.MustRegister(
		r.ingressRequests, r.verifyFailures, r.ingressPublish, r.ingressUnkeyed,
		r.consumerEvents, r.applySeconds, r.batchSize,
		r.relayPublish, r.relayRows,
		r.streamBytes, r.streamMaxBytes, r.streamFull, r.hooksTrimmed, r.orphans,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return r
}

// Gatherer is the underlying registry, for tests and for serving it
// another way.
func (r *Registry) Gatherer() prometheus.Gatherer { return r.reg }

// Register adds a collector (see [NewConsumerCollector] and
// [NewDatabaseCollector]).
func (r *Registry) Register(c prometheus.Collector) error { return r.reg.Register(c) }

// Handler serves the registry in the Prometheus exposition formats. A
// collector that fails is reported in the answer's log and skipped; the
// other metrics are still served.
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{
		Registry:          r.reg,
		ErrorHandling:     promhttp.ContinueOnError,
		Timeout:           10 * time.Second,
		EnableOpenMetrics: true,
	})
}

// IngressRequest counts one answered webhook request. reason is the
// signature failure reason for a 401 ("" otherwise).
func (r *Registry) IngressRequest(source string, status int, verifyReason string) {
	r.ingressRequests.WithLabelValues(source, strconv.Itoa(status)).Inc()
	if verifyReason != "" {
		r.verifyFailures.WithLabelValues(source, verifyReason).Inc()
	}
}

// IngressUnkeyed counts one accepted delivery that its source's ordering
// key did not name, or could not be read from (reason: a
// bridge.Unkeyed* constant).
func (r *Registry) IngressUnkeyed(source, reason string) {
	r.ingressUnkeyed.WithLabelValues(source, reason).Inc()
}

// IngressPublish records one publish to HOOKS, with all its attempts,
// and its result (a bridge.PublishResult).
func (r *Registry) IngressPublish(result string, d time.Duration) {
	r.ingressPublish.WithLabelValues(result).Observe(d.Seconds())
}

// ConsumerBatch records one apply transaction of size events.
func (r *Registry) ConsumerBatch(consumer string, size int, d time.Duration) {
	r.applySeconds.WithLabelValues(consumer).Observe(d.Seconds())
	r.batchSize.WithLabelValues(consumer).Observe(float64(size))
}

// ConsumerEvents counts n messages of consumer with one outcome (a
// consumer.Outcome's name).
func (r *Registry) ConsumerEvents(consumer, outcome string, n int) {
	r.consumerEvents.WithLabelValues(consumer, outcome).Add(float64(n))
}

// RelayBatch records one relay publish of sent+failed rows.
func (r *Registry) RelayBatch(sent, failed int, d time.Duration) {
	if sent+failed == 0 {
		return
	}
	r.relayPublish.WithLabelValues().Observe(d.Seconds())
	r.relayRows.WithLabelValues("sent").Add(float64(sent))
	r.relayRows.WithLabelValues("failed").Add(float64(failed))
}

// InitConsumer makes every outcome series of consumer exist at 0, so rates
// and alerts work before the first event.
func (r *Registry) InitConsumer(consumer string, outcomes []string) {
	for _, o := range outcomes {
		r.consumerEvents.WithLabelValues(consumer, o)
	}
}

// StreamState records a stream's size, limit and whether it refuses new
// messages.
func (r *Registry) StreamState(stream string, bytes uint64, maxBytes int64, full bool) {
	r.streamBytes.WithLabelValues(stream).Set(float64(bytes))
	r.streamMaxBytes.WithLabelValues(stream).Set(float64(maxBytes))
	v := 0.0
	if full {
		v = 1
	}
	r.streamFull.WithLabelValues(stream).Set(v)
}

// HooksTrimmed counts HOOKS messages purged.
func (r *Registry) HooksTrimmed(n uint64) { r.hooksTrimmed.Add(float64(n)) }

// OrphanedDurables records the durables on HOOKS no configured consumer
// owns; a durable not named any more has no series.
func (r *Registry) OrphanedDurables(names []string) {
	r.orphans.Reset()
	for _, n := range names {
		r.orphans.WithLabelValues(n).Set(1)
	}
}
