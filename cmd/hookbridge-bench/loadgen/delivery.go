package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/hookbridge/hookbridge/internal/store"
	"github.com/hookbridge/hookbridge/publisher"
)

// Delivery scenarios.
const (
	DeliveryThroughput = "throughput"
	DeliveryIsolation  = "isolation"
	DeliveryOrder      = "order"
	DeliveryOutage     = "outage"
)

// DeliveryScenarios are every scenario, in the order they run.
var DeliveryScenarios = []string{DeliveryThroughput, DeliveryIsolation, DeliveryOrder, DeliveryOutage}

// DeliveryOptions configure [Delivery]: the delivery role measured as it
// is deployed, `hookbridge serve` processes (relay and delivery roles) on
// a nats-server and a fresh database, with an outbox the bench fills and
// receivers it runs itself.
type DeliveryOptions struct {
	// Exe is the hookbridge binary; NATSExe the load tool's (--mode
	// nats-server).
	Exe      string
	NATSExe  string
	AdminURL string
	// Scenarios to run (default all of DeliveryScenarios).
	Scenarios []string
	// Concurrency is every endpoint's concurrency (default 16, the
	// endpoint default) and the floor's posts in flight.
	Concurrency int
	// Timeout is every endpoint's timeout (default 5s: longer than
	// SlowFor, and a short lease, timeout + 10 s, for the order
	// scenario's failover).
	Timeout time.Duration
	// Retry is every endpoint's retry schedule (nil: hookbridge's
	// default).
	Retry []time.Duration
	// Rate is the events per second enqueued by the isolation, order and
	// outage scenarios (default 100).
	Rate float64

	// Events is the throughput scenario's events (default 5000), enqueued
	// and relayed before the delivery instance starts; MinRatio its
	// promise: deliveries/s at least this share of the floor's posts/s
	// (default 0.8).
	Events   int
	MinRatio float64

	// Endpoints is the isolation scenario's endpoints (default 100), each
	// sent PerEndpoint events (default 10); one answers 503 and one takes
	// SlowFor (default 2s). MaxP99Ratio is its promise: the healthy
	// endpoints' p99 at most this multiple of the run without the two
	// (default 1.5).
	Endpoints   int
	PerEndpoint int
	SlowFor     time.Duration
	MaxP99Ratio float64

	// Instances (default 2) serve OrderedEndpoints ordered endpoints
	// (default 2), each sent Keys × Versions events (default 20 × 20);
	// the last instance is SIGKILLed once KillAt of the deliveries
	// arrived (default 0.4).
	Instances        int
	OrderedEndpoints int
	Keys             int
	Versions         int
	KillAt           float64

	// Outage is how long the outage scenario's receiver is down (default
	// 2m), under load at Rate from a quarter of Outage before it to a
	// quarter after.
	Outage time.Duration

	// Settle ends a wait for deliveries when none arrived for this long
	// (default 6m: the default retry schedule's 5m step and margin).
	Settle   time.Duration
	Progress io.Writer
}

func (o *DeliveryOptions) setDefaults() error {
	if o.Exe == "" || o.NATSExe == "" {
		return errors.New("loadgen: delivery: no hookbridge or hookbridge-bench binary")
	}
	if len(o.Scenarios) == 0 {
		o.Scenarios = DeliveryScenarios
	}
	for _, s := range o.Scenarios {
		if !slices.Contains(DeliveryScenarios, s) {
			return fmt.Errorf("loadgen: delivery: unknown scenario %q (want %s)", s, strings.Join(DeliveryScenarios, ", "))
		}
	}
	def := func(p *int, v int) {
		if *p <= 0 {
			*p = v
		}
	}
	def(&o.Concurrency, 16)
	def(&o.Events, 5000)
	def(&o.Endpoints, 100)
	def(&o.PerEndpoint, 10)
	def(&o.Instances, 2)
	def(&o.OrderedEndpoints, 2)
	def(&o.Keys, 20)
	def(&o.Versions, 20)
	if o.Endpoints < 3 {
		return errors.New("loadgen: delivery: --endpoints must be at least 3 (one failing, one slow, one healthy)")
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Rate <= 0 {
		o.Rate = 100
	}
	if o.MinRatio <= 0 {
		o.MinRatio = 0.8
	}
	if o.SlowFor <= 0 {
		o.SlowFor = 2 * time.Second
	}
	if o.MaxP99Ratio <= 0 {
		o.MaxP99Ratio = 1.5
	}
	if o.KillAt <= 0 {
		o.KillAt = 0.4
	}
	if o.KillAt >= 1 {
		return fmt.Errorf("loadgen: delivery: --kill-at %g: a share of the deliveries, below 1", o.KillAt)
	}
	if o.Outage <= 0 {
		o.Outage = 2 * time.Minute
	}
	if o.Settle <= 0 {
		o.Settle = 6 * time.Minute
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	o.Progress = &syncWriter{w: o.Progress}
	return nil
}

// DeliveryResult is a delivery run's report.
type DeliveryResult struct {
	Throughput *DeliveryThroughputResult `json:"throughput,omitempty"`
	Isolation  *DeliveryIsolationResult  `json:"isolation,omitempty"`
	Order      *DeliveryOrderResult      `json:"order,omitempty"`
	Outage     *DeliveryOutageResult     `json:"outage,omitempty"`
	// Logs lists the directories kept with the processes' logs of the
	// scenarios that broke a promise or failed.
	Logs     []string `json:"logs,omitempty"`
	OK       bool     `json:"ok"`
	Problems []string `json:"problems,omitempty"`
}

// DeliveryThroughputResult compares deliveries/s to a receiver answering
// 204 at once with a bare http.Client loop posting the same bodies.
type DeliveryThroughputResult struct {
	Events      int     `json:"events"`
	Concurrency int     `json:"concurrency"`
	BodyBytes   int     `json:"body_bytes"`
	Delivered   int     `json:"delivered"`
	PerSecond   float64 `json:"deliveries_per_s"`
	FloorPerSec float64 `json:"floor_posts_per_s"`
	Ratio       float64 `json:"ratio"`
	MinRatio    float64 `json:"min_ratio"`
}

// DeliveryIsolationResult is the healthy endpoints' delivery latency
// (enqueue commit → receipt) with and without a failing and a slow
// endpoint among them.
type DeliveryIsolationResult struct {
	Endpoints   int     `json:"endpoints"`
	PerEndpoint int     `json:"per_endpoint"`
	Baseline    Latency `json:"baseline"`
	WithBad     Latency `json:"with_bad"`
	P99Ratio    float64 `json:"p99_ratio"`
	MaxP99Ratio float64 `json:"max_p99_ratio"`
	// Answered503 and SlowAnswered are the bad endpoints' requests.
	Answered503  int `json:"answered_503"`
	SlowAnswered int `json:"slow_answered"`
}

// DeliveryOrderResult is what the ordered endpoints' receiver saw.
type DeliveryOrderResult struct {
	Instances int `json:"instances"`
	Endpoints int `json:"endpoints"`
	Events    int `json:"events"` // per endpoint
	// Expected is Events × Endpoints; Received the distinct deliveries.
	Expected   int `json:"expected"`
	Received   int `json:"received"`
	Duplicates int `json:"duplicates"`
	// OutOfOrder counts first receipts that were not the next version of
	// their key, and resends of a version older than the latest one
	// received.
	OutOfOrder int `json:"out_of_order"`
	// KilledAt is how many deliveries had arrived at the kill;
	// KillToAllSeconds from the kill to the last first receipt.
	KilledAt         int     `json:"killed_at"`
	KillToAllSeconds float64 `json:"kill_to_all_s"`
}

// DeliveryOutageResult is what arrived once the receiver came back.
type DeliveryOutageResult struct {
	OutageSeconds float64 `json:"outage_s"`
	Events        int     `json:"events"`
	Received      int     `json:"received"`
	Duplicates    int     `json:"duplicates"`
	// DuringOutage is the events enqueued while the receiver was down.
	DuringOutage int `json:"enqueued_during_outage"`
	// BackToAllSeconds is from the receiver's return to the last event's
	// first receipt.
	BackToAllSeconds float64 `json:"back_to_all_s"`
	DeadLetters      int     `json:"dead_letters"`
}

// Delivery runs the delivery scenarios and returns the report; the error
// says why a scenario could not be carried out or, with the report, that
// a promise was broken.
func Delivery(ctx context.Context, o DeliveryOptions) (*DeliveryResult, error) {
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	res := &DeliveryResult{OK: true}
	var runErr error
	for _, s := range o.Scenarios {
		var logs string
		var err error
		fmt.Fprintf(o.Progress, "delivery: %s\n", s)
		switch s {
		case DeliveryThroughput:
			res.Throughput, logs, err = deliveryThroughput(ctx, &o)
		case DeliveryIsolation:
			res.Isolation, logs, err = deliveryIsolation(ctx, &o)
		case DeliveryOrder:
			res.Order, logs, err = deliveryOrder(ctx, &o)
		case DeliveryOutage:
			res.Outage, logs, err = deliveryOutage(ctx, &o)
		}
		if logs != "" {
			res.Logs = append(res.Logs, logs)
		}
		if err != nil {
			runErr = errors.Join(runErr, fmt.Errorf("delivery %s: %w", s, err))
			if ctx.Err() != nil {
				break
			}
		}
	}
	res.check()
	if runErr == nil && !res.OK {
		runErr = fmt.Errorf("delivery: %d promise(s) broken", len(res.Problems))
	}
	return res, runErr
}

// check lists the broken promises.
func (r *DeliveryResult) check() {
	add := func(format string, args ...any) { r.Problems = append(r.Problems, fmt.Sprintf(format, args...)) }
	if t := r.Throughput; t != nil {
		if t.Delivered < t.Events {
			add("throughput: %d of %d events delivered", t.Delivered, t.Events)
		}
		if t.Ratio < t.MinRatio {
			add("throughput: %.0f deliveries/s is %.2f of the floor's %.0f posts/s, below %.2f", t.PerSecond, t.Ratio, t.FloorPerSec, t.MinRatio)
		}
	}
	if i := r.Isolation; i != nil {
		if i.P99Ratio > i.MaxP99Ratio {
			add("isolation: healthy endpoints' p99 %.1f ms with the bad two is %.2f× the %.1f ms without, above %.2f×",
				i.WithBad.P99Ms, i.P99Ratio, i.Baseline.P99Ms, i.MaxP99Ratio)
		}
		if i.Answered503 == 0 || i.SlowAnswered == 0 {
			add("isolation: the bad endpoints were not tried (503: %d, slow: %d)", i.Answered503, i.SlowAnswered)
		}
	}
	if o := r.Order; o != nil {
		if o.OutOfOrder > 0 {
			add("order: %d deliveries out of key order", o.OutOfOrder)
		}
		if o.Received < o.Expected {
			add("order: %d of %d events received", o.Received, o.Expected)
		}
	}
	if o := r.Outage; o != nil {
		if o.Received < o.Events {
			add("outage: %d of %d events received", o.Received, o.Events)
		}
		if o.DeadLetters > 0 {
			add("outage: %d dead letters", o.DeadLetters)
		}
	}
	r.OK = len(r.Problems) == 0
}

// Print writes the report as a table.
func (r *DeliveryResult) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if t := r.Throughput; t != nil {
		fmt.Fprintf(tw, "throughput\t%d events of %d bytes, signed, %d in flight: %.0f deliveries/s, floor %.0f posts/s, ratio %.2f (target ≥ %.2f)\n",
			t.Events, t.BodyBytes, t.Concurrency, t.PerSecond, t.FloorPerSec, t.Ratio, t.MinRatio)
	}
	if i := r.Isolation; i != nil {
		fmt.Fprintf(tw, "isolation\t%d endpoints × %d events; healthy endpoints without the bad two: %s\n", i.Endpoints, i.PerEndpoint, i.Baseline)
		fmt.Fprintf(tw, "\twith one answering 503 (%d requests) and one slow (%d requests): %s; p99 ratio %.2f (target ≤ %.2f)\n",
			i.Answered503, i.SlowAnswered, i.WithBad, i.P99Ratio, i.MaxP99Ratio)
	}
	if o := r.Order; o != nil {
		fmt.Fprintf(tw, "order\t%d instances, %d ordered endpoints × %d events, one instance killed at %d deliveries: received %d of %d, %d out of order, %d duplicates, kill → all %.1fs\n",
			o.Instances, o.Endpoints, o.Events, o.KilledAt, o.Received, o.Expected, o.OutOfOrder, o.Duplicates, o.KillToAllSeconds)
	}
	if o := r.Outage; o != nil {
		fmt.Fprintf(tw, "outage\treceiver down %.0fs, %d events (%d enqueued while down): received %d, %d duplicates, back → all %.1fs, %d dead letters\n",
			o.OutageSeconds, o.Events, o.DuringOutage, o.Received, o.Duplicates, o.BackToAllSeconds, o.DeadLetters)
	}
	for _, l := range r.Logs {
		fmt.Fprintf(tw, "logs\t%s\n", l)
	}
	ok := "ok"
	if !r.OK {
		ok = "BROKEN: " + strings.Join(r.Problems, "; ")
	}
	fmt.Fprintf(tw, "result\t%s\n", ok)
	tw.Flush()
}

// benchBody is an event's payload: the receiver reads the endpoint, key,
// version and the bench's id of the event from it.
type benchBody struct {
	Type string `json:"type"`
	Key  string `json:"key,omitempty"`
	V    int    `json:"v,omitempty"`
	ID   string `json:"id,omitempty"` // the bench's id of the event
	Pad  string `json:"pad,omitempty"`
}

func (b benchBody) bytes() []byte {
	out, _ := json.Marshal(b) // plain data: never fails
	return out
}

// withEnv runs fn in a fresh environment of endpoints and closes it,
// keeping the logs when fn failed or broke a promise (broken reports it).
func withEnv(ctx context.Context, o *DeliveryOptions, endpoints []deliveryEndpoint, fn func(*deliveryEnv) (broken bool, err error)) (string, error) {
	env, err := newDeliveryEnv(ctx, o, endpoints)
	broken := false
	if err == nil {
		broken, err = fn(env)
	}
	logs, cerr := env.close(err != nil || broken)
	return logs, errors.Join(err, cerr)
}

// deliveryThroughput delivers Events from a backlog in EVENTS, then posts
// the same bodies with a bare client loop.
func deliveryThroughput(ctx context.Context, o *DeliveryOptions) (*DeliveryThroughputResult, string, error) {
	var got atomic.Int64
	var first, last atomic.Int64
	rcv, err := startReceiver(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		now := time.Now().UnixNano()
		if got.Add(1) == 1 {
			first.Store(now)
		}
		last.Store(now)
		w.WriteHeader(http.StatusNoContent)
	}))
	if err != nil {
		return nil, "", err
	}
	defer rcv.down()
	body := benchBody{Type: "bench.throughput", Pad: strings.Repeat("x", 400)}.bytes()
	res := &DeliveryThroughputResult{Events: o.Events, Concurrency: o.Concurrency, BodyBytes: len(body), MinRatio: o.MinRatio}
	ep := deliveryEndpoint{name: "tp", url: rcv.url("/tp"), subject: "events.bench.tp"}
	logs, err := withEnv(ctx, o, []deliveryEndpoint{ep}, func(env *deliveryEnv) (bool, error) {
		hb, err := env.instance("hb1", "delivery")
		if err != nil {
			return false, err
		}
		relay, err := env.instance("relay", "relay")
		if err != nil {
			return false, err
		}
		// The delivery instance creates the endpoint's durable, which
		// reads the events published after it; it then stops, so that
		// the backlog is in EVENTS before it starts again and only the
		// delivery is timed (the relay's pace is the outbox's, measured
		// elsewhere).
		if err := env.start(ctx, hb); err != nil {
			return false, err
		}
		if err := env.awaitDurables(ctx, 1); err != nil {
			return false, err
		}
		if err := hb.stop(); err != nil {
			return false, err
		}
		if err := env.start(ctx, relay); err != nil {
			return false, err
		}
		if err := env.pace(ctx, 0, o.Events, func(i int) publisher.Message {
			return publisher.Message{ID: "tp-" + strconv.Itoa(i), Subject: "events.bench.tp", Payload: body}
		}); err != nil {
			return false, err
		}
		// Enqueued, so pending until relayed.
		if !awaitCount(ctx, 1, o.Settle, func() int {
			if n, err := store.OutboxCountPending(ctx, env.pool); err == nil && n == 0 {
				return 1
			}
			return 0
		}) {
			return false, errors.New("the relay did not publish the backlog")
		}
		fmt.Fprintf(o.Progress, "delivery throughput: %d events in EVENTS, starting the delivery instance\n", o.Events)
		if err := env.start(ctx, hb); err != nil {
			return false, err
		}
		if !awaitCount(ctx, o.Events, o.Settle, func() int { return int(got.Load()) }) {
			res.Delivered = int(got.Load())
			return true, nil
		}
		res.Delivered = int(got.Load())
		res.PerSecond = float64(o.Events-1) / time.Duration(last.Load()-first.Load()).Seconds()
		return false, nil
	})
	if err != nil {
		return res, logs, err
	}
	// The floor: the same bodies, the same concurrency, the same receiver.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.Concurrency}}
	defer client.CloseIdleConnections()
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range o.Concurrency {
		wg.Go(func() {
			for next.Add(1) <= int64(o.Events) {
				resp, err := client.Post(rcv.url("/tp"), "application/json", bytes.NewReader(body))
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		})
	}
	wg.Wait()
	res.FloorPerSec = float64(o.Events) / time.Since(start).Seconds()
	if res.FloorPerSec > 0 {
		res.Ratio = res.PerSecond / res.FloorPerSec
	}
	return res, logs, nil
}
