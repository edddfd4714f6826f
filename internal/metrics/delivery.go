package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The outgoing delivery's metrics, per endpoint: what each attempt did
// (counted as it happens by the instance that made it) and the
// endpoint's backlog and state (read at scrape time from JetStream and
// Postgres, so every instance reports the same figures).

// Delivery holds the delivery's counters and histograms.
type Delivery struct {
	attempts    *prometheus.CounterVec
	successes   *prometheus.CounterVec
	failures    *prometheus.CounterVec
	seconds     *prometheus.HistogramVec
	deadLetters *prometheus.CounterVec
	disabled    *prometheus.CounterVec
}

// NewDelivery creates the delivery's metrics in r.
func NewDelivery(r *Registry) (*Delivery, error) {
	d := &Delivery{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "delivery", Name: "attempts_total",
			Help: "HTTP attempts to each endpoint, by the outcome's class: 2xx (success), 1xx, 3xx, 4xx, 5xx by the answer's status; timeout, connect (refused, reset, TLS) or refused (an address the endpoint may not reach) without one; other.",
		}, []string{"endpoint", "class"}),
		successes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "delivery", Name: "successes_total",
			Help: "Attempts answered with a 2xx within the endpoint's timeout.",
		}, []string{"endpoint"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "delivery", Name: "failures_total",
			Help: "Failed attempts, by class (as attempts_total); each is retried on the endpoint's schedule, the last one dead-lettered.",
		}, []string{"endpoint", "class"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Subsystem: "delivery", Name: "attempt_seconds",
			Help:    "Time from an attempt's request to its answer (or failure).",
			Buckets: latencyBuckets,
		}, []string{"endpoint"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "delivery", Name: "dead_letters_total",
			Help: "Deliveries that failed their endpoint's whole schedule (dead-lettered per endpoint).",
		}, []string{"endpoint"}),
		disabled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "delivery", Name: "endpoint_disabled_total",
			Help: "Times an endpoint was disabled by this instance after failing every attempt for its disable_after.",
		}, []string{"endpoint"}),
	}
	for _, c := range []prometheus.Collector{d.attempts, d.successes, d.failures, d.seconds, d.deadLetters, d.disabled} {
		if err := r.Register(c); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// InitEndpoint makes every series of endpoint exist at 0, so rates and
// alerts work before its first attempt.
func (d *Delivery) InitEndpoint(endpoint string, classes []string) {
	d.successes.WithLabelValues(endpoint)
	d.deadLetters.WithLabelValues(endpoint)
	d.disabled.WithLabelValues(endpoint)
	for _, c := range classes {
		d.attempts.WithLabelValues(endpoint, c)
		if c != "2xx" {
			d.failures.WithLabelValues(endpoint, c)
		}
	}
}

// Attempt records one attempt to endpoint: its class and duration.
func (d *Delivery) Attempt(endpoint, class string, success bool, took time.Duration) {
	d.attempts.WithLabelValues(endpoint, class).Inc()
	if success {
		d.successes.WithLabelValues(endpoint).Inc()
	} else {
		d.failures.WithLabelValues(endpoint, class).Inc()
	}
	d.seconds.WithLabelValues(endpoint).Observe(took.Seconds())
}

// DeadLetter counts one dead letter of endpoint.
func (d *Delivery) DeadLetter(endpoint string) { d.deadLetters.WithLabelValues(endpoint).Inc() }

// Disabled counts one automatic disable of endpoint.
func (d *Delivery) Disabled(endpoint string) { d.disabled.WithLabelValues(endpoint).Inc() }

// EndpointState is what JetStream and Postgres say of one endpoint.
type EndpointState struct {
	Name string
	// State is enabled, failing or disabled.
	State string
	// Pending, AckPending and Tracked make its backlog: not read from
	// EVENTS, read and not settled, and in Postgres (failing, parked,
	// requeued, replayed).
	Pending    uint64
	AckPending int
	Tracked    int
	// DeadLetters are its unresolved dead letters.
	DeadLetters int
}

// DeliveryState looks up the endpoints' states and the durables on EVENTS
// of endpoints no longer configured.
type DeliveryState func(ctx context.Context) (endpoints []EndpointState, orphans []string, err error)

var (
	descDeliveryBacklog = prometheus.NewDesc(Namespace+"_delivery_backlog",
		"Events an endpoint has not been sent yet: not read from EVENTS (pending), read and not settled (ack pending) and in Postgres (failing, parked behind a failing event of their key, requeued, replayed).", []string{"endpoint", "where"}, nil)
	descDeliveryState = prometheus.NewDesc(Namespace+"_delivery_endpoint_state",
		"1 for an endpoint's current state: enabled, failing (every attempt failing since some time; disabled after its disable_after) or disabled (its events wait until it is enabled), else 0.", []string{"endpoint", "state"}, nil)
	descDeliveryDead = prometheus.NewDesc(Namespace+"_delivery_dead_letters",
		"An endpoint's unresolved dead letters.", []string{"endpoint"}, nil)
	descDeliveryOrphans = prometheus.NewDesc(Namespace+"_delivery_orphaned_durables",
		"1 for each durable on EVENTS of an endpoint no longer configured: it keeps every event it has not acked (a renamed endpoint reads a new durable, from new events).", []string{"durable"}, nil)
	descDeliveryUp = prometheus.NewDesc(Namespace+"_delivery_info_up",
		"1 if the endpoints' state could be read at this scrape, else 0.", nil, nil)
)

// deliveryStates are the values of the state label.
var deliveryStates = []string{"enabled", "failing", "disabled"}

type deliveryCollector struct {
	state   DeliveryState
	timeout time.Duration
}

// NewDeliveryCollector returns a collector of the endpoints' backlog,
// state and dead letters and of orphaned delivery durables, looked up
// with state when Prometheus scrapes (bounded by timeout; 0 =
// [DefaultScrapeTimeout]).
func NewDeliveryCollector(state DeliveryState, timeout time.Duration) prometheus.Collector {
	if timeout <= 0 {
		timeout = DefaultScrapeTimeout
	}
	return &deliveryCollector{state: state, timeout: timeout}
}

func (c *deliveryCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDeliveryBacklog, descDeliveryState, descDeliveryDead, descDeliveryOrphans, descDeliveryUp} {
		ch <- d
	}
}

func (c *deliveryCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	endpoints, orphans, err := c.state(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(descDeliveryUp, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(descDeliveryUp, prometheus.GaugeValue, 1)
	for _, e := range endpoints {
		gauge := func(d *prometheus.Desc, v float64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{e.Name}, labels...)...)
		}
		gauge(descDeliveryBacklog, float64(e.Pending), "pending")
		gauge(descDeliveryBacklog, float64(e.AckPending), "ack_pending")
		gauge(descDeliveryBacklog, float64(e.Tracked), "postgres")
		for _, s := range deliveryStates {
			gauge(descDeliveryState, boolValue(s == e.State), s)
		}
		gauge(descDeliveryDead, float64(e.DeadLetters))
	}
	for _, o := range orphans {
		ch <- prometheus.MustNewConstMetric(descDeliveryOrphans, prometheus.GaugeValue, 1, o)
	}
}
