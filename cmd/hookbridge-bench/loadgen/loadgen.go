// Package loadgen drives signed Standard Webhooks at a hookbridge ingress
// and measures what happens to them: ingress requests/s and latency to the
// answer, end-to-end latency to the committed inbox row, apply throughput,
// and finally whether every event was applied exactly once, counted in the
// database. It also measures the floors hookbridge is compared with: raw
// JetStream publishing, a bare HTTP→publish server and raw Postgres
// commits. cmd/hookbridge-bench is its command line; tests run it small.
//
// It is built on hookbridge's public pieces: the app library, started in
// this process by [AppFactory] (or a hookbridge at a URL), and
// bridge/verify's signer.
package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/internal/pgtemp"
)

// Options configure one load run ([Load]).
type Options struct {
	// URL is the base URL of the ingress ("http://127.0.0.1:8080"); the
	// requests go to URL/webhooks/Source.
	URL    string
	Source string // default "demo"
	// Secret signs the requests (Standard Webhooks, "whsec_…").
	Secret string
	// Concurrency is the number of requests in flight at most (default 16).
	Concurrency int
	// Total is the number of events to send (default 1000).
	Total int
	// Rate, when > 0, sends at this many events per second (open loop:
	// latency counts from the scheduled send time, so a stalled server is
	// not hidden by a stalled client). 0 sends as fast as Concurrency
	// allows (closed loop).
	Rate float64
	// RunID prefixes every event and order id (default bench-<random>), so
	// runs against a shared database can be told apart.
	RunID string
	// PaidEvery, when > 1, makes every PaidEvery-th event an order.paid
	// of an order whose order.created was answered already (5: 800
	// created and 200 paid per 1,000 events); while no such order is
	// waiting it sends an order.created instead. 0 sends order.created
	// only.
	PaidEvery int
	// PaidFirst sends each of those order.paid events just before its
	// order's order.created (the next event), as senders that do not keep
	// order do: a keyed consumer's handler postpones the payment until the
	// order exists.
	PaidFirst bool

	// DatabaseURL is the instance's database. With it the run measures
	// end-to-end latency to the inbox row and, with Check, verifies the
	// counts. Without it only the ingress is measured.
	DatabaseURL string
	// Consumer is the inbox consumer name of the orders handler (default
	// "orders").
	Consumer string
	// Check waits for every accepted event to be applied and verifies the
	// counts (requires DatabaseURL).
	Check bool
	// PollInterval is how often the inbox is polled (default 2ms); the
	// end-to-end figures are upper bounds by up to this much.
	PollInterval time.Duration
	// ApplyIdleTimeout ends the wait for applies when none arrives for this
	// long (default 30s).
	ApplyIdleTimeout time.Duration
	// MaxRetries is how often a request that failed with a network error,
	// 429 or 5xx is retried, as a sender would (default 5). A retry sends
	// the same bytes with the same signature headers, so one whose first
	// attempt was stored but not answered is a duplicate, not a conflict.
	MaxRetries int
	// ResignAfter is how old a signature may get before a retry is signed
	// again (same body, new timestamp and signature), so a retry stays
	// inside the receiver's timestamp tolerance; default 4 minutes, inside
	// the usual 5.
	ResignAfter time.Duration
	// Events, when set, subscribes to the outgoing events the relay
	// publishes on events.> and calls fn with each payload until stop; the
	// run then also measures the latency to the relayed event (the orders
	// handler names the webhook in the payload's cause.event_id).
	Events EventSource
	// Progress receives a progress line every ProgressInterval (default 1s).
	Progress         io.Writer
	ProgressInterval time.Duration
	// RSSPID, when > 0, samples the resident set of that process (a
	// hookbridge running on this machine) every 250ms during the run.
	RSSPID int
	// Finished, when set, is called once every accepted event was applied
	// (or waiting for that gave up), before the count check, while the
	// instance still runs: `hookbridge-bench --mem-profile` writes its
	// heap profile there.
	Finished func()
	// Client sends the requests (default: keep-alive client sized to
	// Concurrency).
	Client *http.Client
}

func (o *Options) setDefaults() error {
	if o.URL == "" {
		return errors.New("loadgen: no URL")
	}
	o.URL = strings.TrimSuffix(o.URL, "/")
	if o.Source == "" {
		o.Source = "demo"
	}
	if o.Secret == "" {
		return errors.New("loadgen: no secret")
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 16
	}
	if o.Total <= 0 {
		o.Total = 1000
	}
	if o.RunID == "" {
		o.RunID = "bench-" + pgtemp.RandomHex(4)
	}
	if o.Consumer == "" {
		o.Consumer = "orders"
	}
	if o.Check && o.DatabaseURL == "" {
		return errors.New("loadgen: the count check needs the instance's database URL")
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 2 * time.Millisecond
	}
	if o.ApplyIdleTimeout <= 0 {
		o.ApplyIdleTimeout = 30 * time.Second
	}
	if o.MaxRetries < 0 {
		o.MaxRetries = 0
	} else if o.MaxRetries == 0 {
		o.MaxRetries = 5
	}
	if o.ResignAfter <= 0 {
		o.ResignAfter = 4 * time.Minute
	}
	if o.ProgressInterval <= 0 {
		o.ProgressInterval = time.Second
	}
	if o.Client == nil {
		o.Client = NewClient(o.Concurrency)
	}
	return nil
}

// benchAppName is the application_name of the load generator's own
// database connections, so CPU measurements can leave them out.
const benchAppName = "hookbridge-bench"

// EventSource subscribes fn to the messages published on events.>.
type EventSource func(fn func(data []byte)) (stop func(), err error)

// NewClient is a keep-alive HTTP client for concurrency parallel requests.
func NewClient(concurrency int) *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        2 * concurrency,
			MaxIdleConnsPerHost: 2 * concurrency,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		},
	}
}

// Result is what one load run measured.
type Result struct {
	Name        string  `json:"name,omitempty"`
	URL         string  `json:"url"`
	RunID       string  `json:"run_id"`
	Concurrency int     `json:"concurrency"`
	Total       int     `json:"total"`
	Rate        float64 `json:"rate,omitempty"`

	Accepted   int            `json:"accepted"`   // 202
	Duplicates int            `json:"duplicates"` // 200: a retry found it stored
	Failed     int            `json:"failed"`     // never accepted
	Retries    int            `json:"retries"`
	Statuses   map[string]int `json:"statuses"`

	// SendSeconds is from the first send to the last answer.
	SendSeconds float64 `json:"send_seconds"`
	// IngressRPS is accepted requests per second over SendSeconds.
	IngressRPS float64 `json:"ingress_rps"`
	// Ingress is the latency from send (or scheduled send) to the answer.
	Ingress Latency `json:"ingress_latency"`
	// SendCPUSeconds is the CPU time of this process (load generator and
	// an in-process server together) over SendSeconds, and CPUPerRequestUs
	// that per answered request: on a shared machine a steadier figure than
	// the rate.
	SendCPUSeconds  float64 `json:"send_cpu_seconds"`
	CPUPerRequestUs float64 `json:"cpu_per_request_us"`
	// MachineBusy is the fraction of all CPUs busy (every process: this
	// one, Postgres, anything else) over SendSeconds.
	MachineBusy float64 `json:"machine_busy"`

	// Applied is how many accepted events were seen in the inbox.
	Applied int `json:"applied"`
	// E2E is the latency from send (or scheduled send) to the first poll
	// that saw the committed inbox row.
	E2E *Latency `json:"e2e_latency,omitempty"`
	// Relayed is how many accepted events' outgoing events were seen on
	// events.>, and RelayE2E the latency from send to that message.
	Relayed  int      `json:"relayed,omitempty"`
	RelayE2E *Latency `json:"e2e_relayed_latency,omitempty"`
	// ApplyRate is events applied per second between the first and the
	// last inbox row seen; PipelineRate is events per second from the first
	// send to the last inbox row seen or, when the relayed events are
	// measured, to the last relayed event.
	ApplyRate float64 `json:"apply_events_per_s,omitempty"`
	// AppliedFromFirstSend is events applied per second from the first
	// send to the last inbox row seen.
	AppliedFromFirstSend float64 `json:"applied_per_s_from_first_send,omitempty"`
	PipelineRate         float64 `json:"pipeline_events_per_s,omitempty"`
	PollErrors           int     `json:"poll_errors,omitempty"`

	// Redelivered counts JetStream redeliveries to the consumer of an
	// in-process run (-1 or absent: unknown).
	Redelivered *int `json:"redelivered,omitempty"`

	Check *Check `json:"check,omitempty"`
	RSS   *RSS   `json:"rss,omitempty"`
	// WAL is what Postgres wrote to its write-ahead log from the first send
	// until every applied event's outgoing event was relayed and its row
	// recorded (with a database and the relayed events measured).
	WAL *WAL `json:"wal,omitempty"`
}

// Load runs one load: Total signed order.created webhooks with unique
// ids, then (with a database) waits for them to be applied and checks the
// counts. It returns an error only when the run could not be carried out;
// a failed count check is reported in Result.Check.
func Load(ctx context.Context, o Options) (*Result, error) {
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	l := &loader{o: o, url: o.URL + "/webhooks/" + o.Source, ingress: newLatencies(), created: make(chan string, 4096)}
	if _, err := verify.NewStandardWebhooks([]string{o.Secret}, 0); err != nil {
		return nil, fmt.Errorf("loadgen: secret: %w", err)
	}

	var pool *pgxpool.Pool
	if o.DatabaseURL != "" {
		var err error
		if pool, err = openPool(ctx, o.DatabaseURL); err != nil {
			return nil, err
		}
		defer pool.Close()
		l.tracker = newApplyTracker(pool, o.Consumer, o.Source, o.Total, o.PollInterval, o.Events != nil)
	}

	trackCtx, stopTracking := context.WithCancel(ctx)
	var bg sync.WaitGroup
	defer bg.Wait()
	defer stopTracking()
	if l.tracker != nil {
		bg.Go(func() { l.tracker.run(trackCtx) })
	}
	if o.Progress != nil {
		bg.Go(func() { l.report(trackCtx) })
	}
	if l.tracker != nil && o.Events != nil {
		stop, err := o.Events(l.noteRelayed)
		if err != nil {
			return nil, fmt.Errorf("loadgen: subscribe to events: %w", err)
		}
		defer stop()
	}

	var rss *rssSampler
	if o.RSSPID > 0 {
		if ReadPIDRSS(o.RSSPID) == 0 {
			return nil, fmt.Errorf("loadgen: cannot read the RSS of pid %d", o.RSSPID)
		}
		rss = startRSSOf(func() int64 { return ReadPIDRSS(o.RSSPID) }, 250*time.Millisecond)
	}
	var wal0 walMark
	if pool != nil {
		var err error
		if wal0, err = readWAL(ctx, pool); err != nil {
			return nil, fmt.Errorf("loadgen: %w", err)
		}
	}
	err := l.sendAll(ctx)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err != nil {
		return l.result(), err
	}

	res := l.result()
	if rss != nil {
		defer func() {
			r := rss.finish()
			r.Of = fmt.Sprintf("pid %d", o.RSSPID)
			res.RSS = &r
		}()
	}
	if l.tracker == nil {
		return res, nil
	}
	return l.awaitApplied(ctx, pool, wal0, res, stopTracking)
}

// openPool connects the load generator to the database at url, with at
// most two connections.
func openPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("loadgen: database url: %w", err)
	}
	cfg.MaxConns = 2
	cfg.ConnConfig.RuntimeParams["application_name"] = benchAppName
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("loadgen: database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("loadgen: database: %w", err)
	}
	return pool, nil
}

// noteRelayed tells the tracker of an outgoing event caused by one of
// this run's webhooks; other events on the subject are not this run's.
func (l *loader) noteRelayed(data []byte) {
	at := time.Now()
	var ev struct {
		Cause struct {
			Source  string `json:"source"`
			EventID string `json:"event_id"`
		} `json:"cause"`
	}
	if json.Unmarshal(data, &ev) == nil && ev.Cause.Source == l.o.Source && strings.HasPrefix(ev.Cause.EventID, l.o.RunID+"-") {
		l.tracker.relayed(ev.Cause.EventID, at)
	}
}

// sendAll drives the load, measuring this process's CPU time and the
// machine's busy share meanwhile. Its error is why the run was aborted.
func (l *loader) sendAll(ctx context.Context) error {
	cpu0 := ProcessCPU()
	busy0, total0, _ := cpuTimes()
	// Too many events that no retry got accepted (the server unreachable
	// or failing) end the run early: the figures would mean nothing, and a
	// stuck server must not hold the run for hours.
	driveCtx, abort := context.WithCancelCause(ctx)
	defer abort(nil)
	l.abort = abort
	l.start = time.Now()
	l.drive(driveCtx)
	l.end = time.Now()
	l.cpu = ProcessCPU() - cpu0
	if busy1, total1, err := cpuTimes(); err == nil && total1 > total0 {
		l.busy = (busy1 - busy0) / (total1 - total0)
	}
	return context.Cause(driveCtx)
}

// awaitApplied waits for the accepted events to be applied (and relayed,
// when the events are measured), adds the figures to res and, with
// Options.Check, checks the counts.
func (l *loader) awaitApplied(ctx context.Context, pool *pgxpool.Pool, wal0 walMark, res *Result, stopTracking func()) (*Result, error) {
	o := l.o
	want := res.Accepted + res.Duplicates
	l.tracker.wait(ctx, want, false, o.ApplyIdleTimeout)
	if o.Events != nil {
		l.tracker.wait(ctx, want, true, 10*time.Second)
	}
	stopTracking()
	f := l.tracker.figures()
	res.Applied = f.seen
	res.E2E = &f.e2e
	if o.Events != nil {
		res.Relayed = f.relayed
		res.RelayE2E = &f.relayE2E
	}
	res.PollErrors = f.pollErrs
	if o.Events != nil {
		if err := l.measureWAL(ctx, pool, wal0, res); err != nil {
			return res, err
		}
	}
	l.setRates(res, f)
	if o.Finished != nil {
		o.Finished()
	}
	if f.pollErrs > 0 && f.seen < want {
		return res, fmt.Errorf("loadgen: polling the inbox failed %d times: %w", f.pollErrs, f.lastErr)
	}
	if o.Check {
		// Give a wrongly redelivered or twice-applied event time to
		// show up before counting.
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
		c, err := VerifyCounts(ctx, pool, o.Consumer, o.Source, o.RunID, want, res.Failed)
		if err != nil {
			return res, err
		}
		res.Check = c.WithPaid(int(l.paid.Load()))
	}
	return res, nil
}

// setRates sets the apply and pipeline rates of res from the tracker's
// figures f.
func (l *loader) setRates(res *Result, f trackerFigures) {
	if f.seen > 1 && f.lastSeen.After(f.firstSeen) {
		res.ApplyRate = float64(f.seen-1) / f.lastSeen.Sub(f.firstSeen).Seconds()
	}
	if f.seen > 0 {
		res.AppliedFromFirstSend = float64(f.seen) / f.lastSeen.Sub(l.start).Seconds()
		res.PipelineRate = res.AppliedFromFirstSend
	}
	if l.o.Events != nil && f.relayed > 0 {
		// With the relay measured too, the pipeline is done when the
		// outgoing events are out, not when the inbox rows are in.
		res.PipelineRate = float64(f.relayed) / f.lastRelayed.Sub(l.start).Seconds()
	}
}

// measureWAL records the WAL written since wal0 per applied event, once
// the relay has recorded every row it published.
func (l *loader) measureWAL(ctx context.Context, pool *pgxpool.Pool, wal0 walMark, res *Result) error {
	if err := waitOutboxDrained(ctx, pool, 30*time.Second); err != nil {
		return fmt.Errorf("loadgen: WAL per event: %w", err)
	}
	w, err := walSince(ctx, pool, wal0, res.Applied)
	if err != nil {
		return fmt.Errorf("loadgen: %w", err)
	}
	res.WAL = w
	return nil
}

// loader is one run in progress.
type loader struct {
	o       Options
	url     string
	tracker *applyTracker
	start   time.Time
	end     time.Time
	cpu     time.Duration
	busy    float64
	abort   context.CancelCauseFunc

	ingress *latencies
	// created holds order ids whose order.created was answered, for
	// order.paid events (PaidEvery); paid counts those accepted.
	created  chan string
	paid     atomic.Int64
	sent     atomic.Int64
	answered atomic.Int64
	accepted atomic.Int64
	dups     atomic.Int64
	failed   atomic.Int64
	// unavailable counts failures a sender would keep retrying (network
	// errors, 429, 5xx); too many of them abort the run.
	unavailable atomic.Int64
	retries     atomic.Int64
	statuses    [600]atomic.Int64 // index 0: network errors
}

type job struct {
	n  int
	at time.Time // scheduled send time
}

func (l *loader) drive(ctx context.Context) {
	var wg sync.WaitGroup
	if l.o.Rate > 0 {
		jobs := make(chan job, 4096)
		go func() {
			defer close(jobs)
			interval := time.Duration(float64(time.Second) / l.o.Rate)
			for i := range l.o.Total {
				at := l.start.Add(time.Duration(i) * interval)
				if d := time.Until(at); d > 0 {
					time.Sleep(d)
				}
				select {
				case jobs <- job{n: i, at: at}:
				case <-ctx.Done():
					return
				}
			}
		}()
		for range l.o.Concurrency {
			wg.Go(func() {
				for j := range jobs {
					l.send(ctx, j.n, j.at)
				}
			})
		}
	} else {
		var next atomic.Int64
		for range l.o.Concurrency {
			wg.Go(func() {
				for ctx.Err() == nil {
					n := int(next.Add(1) - 1)
					if n >= l.o.Total {
						return
					}
					l.send(ctx, n, time.Now())
				}
			})
		}
	}
	wg.Wait()
}

// EventID is the id of event n of a run.
func EventID(runID string, n int) string { return fmt.Sprintf("%s-%d", runID, n) }

// OrderBody is the demo orders webhook body creating order orderID.
func OrderBody(orderID string, n int, now time.Time) []byte {
	return fmt.Appendf(nil, `{"type":"order.created","timestamp":%q,"data":{"order_id":%q,"amount_cents":%d,"currency":"EUR"}}`,
		now.UTC().Format(time.RFC3339), orderID, 100+n%100000)
}

// PaidBody is the demo orders webhook body paying order orderID.
func PaidBody(orderID string, n int, now time.Time) []byte {
	return fmt.Appendf(nil, `{"type":"order.paid","timestamp":%q,"data":{"order_id":%q,"amount_cents":%d,"currency":"EUR"}}`,
		now.UTC().Format(time.RFC3339), orderID, 100+n%100000)
}

// body is event n's body: an order.created of its own order, or, every
// PaidEvery-th event, an order.paid of an order already created.
func (l *loader) body(id string, n int, now time.Time) (body []byte, paidOrder string) {
	if l.o.PaidFirst && l.o.PaidEvery > 1 && n%l.o.PaidEvery == l.o.PaidEvery-1 && n+1 < l.o.Total {
		order := EventID(l.o.RunID, n+1) // created by the next event
		return PaidBody(order, n, now), order
	}
	if l.o.PaidEvery > 1 && n%l.o.PaidEvery == l.o.PaidEvery-1 {
		select {
		case order := <-l.created:
			return PaidBody(order, n, now), order
		default:
		}
	}
	return OrderBody(id, n, now), ""
}

// send delivers event n, retrying as a sender would; start is when the
// sender wanted it sent.
func (l *loader) send(ctx context.Context, n int, start time.Time) {
	id := EventID(l.o.RunID, n)
	l.sent.Add(1)
	// The body is made once: a real sender retries the same bytes. Only
	// the signature is renewed, when it would soon be too old to verify.
	signedAt := time.Now()
	body, paidOrder := l.body(id, n, signedAt)
	var signed http.Header
	for attempt := 0; ; attempt++ {
		if signed == nil || time.Since(signedAt) > l.o.ResignAfter {
			if signed != nil {
				signedAt = time.Now()
			}
			var err error
			if signed, err = verify.SignHeaders(verify.SchemeStandardWebhooks, l.o.Secret, id, signedAt, body, verify.HMACConfig{}); err != nil {
				l.abort(fmt.Errorf("loadgen: sign: %w", err))
				return
			}
		}
		code, err := l.post(ctx, body, signed)
		if ctx.Err() != nil {
			return
		}
		l.statuses[code].Add(1)
		switch {
		case code == http.StatusAccepted || code == http.StatusOK:
			l.ingress.record(time.Since(start))
			if code == http.StatusAccepted {
				l.accepted.Add(1)
			} else {
				l.dups.Add(1)
			}
			l.answered.Add(1)
			if l.tracker != nil {
				l.tracker.add(id, n, start)
			}
			l.noteAnswered(id, paidOrder)
			return
		case (err != nil || code == http.StatusTooManyRequests || code >= 500) && attempt < l.o.MaxRetries:
			l.retries.Add(1)
			time.Sleep(time.Duration(50<<attempt) * time.Millisecond)
		default:
			l.failed.Add(1)
			if retryable := err != nil || code == http.StatusTooManyRequests || code >= 500; retryable {
				if n := l.unavailable.Add(1); n > int64(max(10, l.o.Total/100)) {
					l.abort(fmt.Errorf("loadgen: %d events not accepted after %d retries each (last: status %d, %v); run aborted", n, l.o.MaxRetries, code, err))
				}
			}
			l.answered.Add(1)
			return
		}
	}
}

// noteAnswered offers a created order to later order.paid events, or
// counts an accepted order.paid.
func (l *loader) noteAnswered(id, paidOrder string) {
	if paidOrder != "" {
		l.paid.Add(1)
		return
	}
	if l.o.PaidEvery > 1 && !l.o.PaidFirst {
		select {
		case l.created <- id:
		default:
		}
	}
}

// post sends one request with the signed headers and returns the status
// (0 on a network error).
func (l *loader) post(ctx context.Context, body []byte, signed http.Header) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header = signed.Clone()
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.o.Client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

func (l *loader) result() *Result {
	r := &Result{
		URL: l.url, RunID: l.o.RunID, Concurrency: l.o.Concurrency, Total: l.o.Total, Rate: l.o.Rate,
		Accepted: int(l.accepted.Load()), Duplicates: int(l.dups.Load()), Failed: int(l.failed.Load()),
		Retries: int(l.retries.Load()), Statuses: map[string]int{},
		SendSeconds: l.end.Sub(l.start).Seconds(),
		Ingress:     l.ingress.summary(),
	}
	if r.SendSeconds > 0 {
		r.IngressRPS = float64(r.Accepted+r.Duplicates) / r.SendSeconds
	}
	r.SendCPUSeconds = l.cpu.Seconds()
	r.MachineBusy = l.busy
	if n := l.answered.Load(); n > 0 {
		r.CPUPerRequestUs = float64(l.cpu.Microseconds()) / float64(n)
	}
	for code := range l.statuses {
		if v := l.statuses[code].Load(); v > 0 {
			name := fmt.Sprint(code)
			if code == 0 {
				name = "network_error"
			}
			r.Statuses[name] = int(v)
		}
	}
	return r
}

// report writes a progress line every ProgressInterval.
func (l *loader) report(ctx context.Context) {
	t := time.NewTicker(l.o.ProgressInterval)
	defer t.Stop()
	lastAnswered, last := int64(0), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			answered := l.answered.Load()
			rate := float64(answered-lastAnswered) / now.Sub(last).Seconds()
			lastAnswered, last = answered, now
			line := fmt.Sprintf("bench %s: %d/%d answered (%.0f/s), %d failed, %d retries",
				time.Since(l.start).Round(time.Second), answered, l.o.Total, rate, l.failed.Load(), l.retries.Load())
			if l.tracker != nil {
				line += fmt.Sprintf(", %d applied", l.tracker.applied())
			}
			if rss := ReadRSS(); rss > 0 {
				line += fmt.Sprintf(", rss %d MiB", rss/1024)
			}
			fmt.Fprintln(l.o.Progress, line)
		}
	}
}
