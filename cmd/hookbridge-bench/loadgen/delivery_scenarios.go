package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hookbridge/hookbridge/publisher"
)

// keyHeader is the message header naming an ordered endpoint's key.
const keyHeader = "Bench-Key"

// isolationWarmUp is the type of the isolation scenario's warm-up events.
const isolationWarmUp = "bench.isolation.warmup"

// deliveryIsolation runs the isolation scenario twice, in fresh
// environments: all endpoints healthy, then one answering 503 and one
// taking SlowFor.
func deliveryIsolation(ctx context.Context, o *DeliveryOptions) (*DeliveryIsolationResult, string, error) {
	res := &DeliveryIsolationResult{Endpoints: o.Endpoints, PerEndpoint: o.PerEndpoint, MaxP99Ratio: o.MaxP99Ratio}
	var logs []string
	for _, bad := range []bool{false, true} {
		lat, n503, nSlow, l, err := isolationRun(ctx, o, bad)
		if l != "" {
			logs = append(logs, l)
		}
		if err != nil {
			return res, strings.Join(logs, " "), err
		}
		if bad {
			res.WithBad, res.Answered503, res.SlowAnswered = lat, n503, nSlow
		} else {
			res.Baseline = lat
		}
	}
	if res.Baseline.P99Ms > 0 {
		res.P99Ratio = res.WithBad.P99Ms / res.Baseline.P99Ms
	}
	return res, strings.Join(logs, " "), nil
}

// isolationRun enqueues PerEndpoint events to each of Endpoints endpoints
// at Rate and measures the healthy endpoints' latency from the
// enqueue's commit to the first receipt; with bad, endpoint 0 answers 503 and
// endpoint 1 takes SlowFor. A warm-up round of one event per endpoint,
// not measured, comes first and is awaited on the healthy endpoints:
// without it the first events of a run, which wait for the processes'
// first enqueue, relay publish, pull and connection to each endpoint,
// were the whole tail (about the 1 % of the samples p99 looks at), and
// the ratio of the two runs compared their start-ups, not the bad
// endpoints' effect. The latency runs from the enqueue's commit (the
// time the bench's transaction returned), not from before it: the
// commit is the shared Postgres's (a WAL flush that other work on the
// machine can hold up for 100 ms), and counting it made slow commits a
// large part of the tail of either run.
func isolationRun(ctx context.Context, o *DeliveryOptions, bad bool) (Latency, int, int, string, error) {
	var mu sync.Mutex
	seen := map[string]bool{}
	// The measured events' commit and first receipt, by the bench's id.
	committed, received := map[string]time.Time{}, map[string]time.Time{}
	var n503, nSlow, warm atomic.Int64
	healthy := func(ep int) bool { return !bad || ep >= 2 }
	rcv, err := startReceiver(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		ep, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/e"))
		switch {
		case bad && ep == 0:
			n503.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		case bad && ep == 1:
			nSlow.Add(1)
			select {
			case <-time.After(o.SlowFor):
			case <-r.Context().Done():
			}
		}
		var b benchBody
		if json.Unmarshal(raw, &b) == nil && healthy(ep) {
			id := r.Header.Get("webhook-id")
			mu.Lock()
			first := !seen[id]
			seen[id] = true
			mu.Unlock()
			switch {
			case !first:
			case b.Type == isolationWarmUp:
				warm.Add(1)
			default:
				mu.Lock()
				if _, ok := received[b.ID]; !ok {
					received[b.ID] = time.Now()
				}
				mu.Unlock()
			}
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	if err != nil {
		return Latency{}, 0, 0, "", err
	}
	defer rcv.down()
	endpoints := make([]deliveryEndpoint, o.Endpoints)
	for i := range endpoints {
		endpoints[i] = deliveryEndpoint{name: fmt.Sprintf("e%d", i), url: rcv.url(fmt.Sprintf("/e%d", i)), subject: fmt.Sprintf("events.bench.e%d", i)}
	}
	healthyN := o.Endpoints
	if bad {
		healthyN -= 2
	}
	want := o.PerEndpoint * healthyN
	logs, err := withEnv(ctx, o, endpoints, func(env *deliveryEnv) (bool, error) {
		hb, err := env.instance("hb1", "relay", "delivery")
		if err != nil {
			return false, err
		}
		if err := env.start(ctx, hb); err != nil {
			return false, err
		}
		if err := env.awaitDurables(ctx, len(endpoints)); err != nil {
			return false, err
		}
		if err := env.pace(ctx, o.Rate, o.Endpoints, func(i int) publisher.Message {
			return publisher.Message{ID: fmt.Sprintf("iso-warm-%d", i), Subject: fmt.Sprintf("events.bench.e%d", i),
				Payload: benchBody{Type: isolationWarmUp}.bytes()}
		}); err != nil {
			return false, err
		}
		if !awaitCount(ctx, healthyN, o.Settle, func() int { return int(warm.Load()) }) {
			return true, fmt.Errorf("warm-up: %d of the healthy endpoints' %d events arrived", warm.Load(), healthyN)
		}
		fmt.Fprintf(o.Progress, "delivery isolation (bad endpoints: %v): %d endpoints warmed up, %d events at %.0f/s\n", bad, o.Endpoints, o.Endpoints*o.PerEndpoint, o.Rate)
		env.committed = func(msgs []publisher.Message) {
			now := time.Now()
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				committed[m.ID] = now
			}
		}
		// Round robin over the endpoints: each gets its events spread
		// over the whole run.
		if err := env.pace(ctx, o.Rate, o.Endpoints*o.PerEndpoint, func(i int) publisher.Message {
			ep := i % o.Endpoints
			return publisher.Message{ID: fmt.Sprintf("iso-%d", i), Subject: fmt.Sprintf("events.bench.e%d", ep),
				Payload: benchBody{Type: "bench.isolation", ID: fmt.Sprintf("iso-%d", i)}.bytes()}
		}); err != nil {
			return false, err
		}
		n := func() int {
			mu.Lock()
			defer mu.Unlock()
			return len(received)
		}
		if !awaitCount(ctx, want, o.Settle, n) {
			return true, fmt.Errorf("%d of the healthy endpoints' %d events arrived", n(), want)
		}
		return false, nil
	})
	lat := newLatencies()
	mu.Lock()
	for id, at := range received {
		if c, ok := committed[id]; ok {
			lat.record(at.Sub(c))
		}
	}
	mu.Unlock()
	return lat.summary(), int(n503.Load()), int(nSlow.Load()), logs, err
}

// orderLog is what the ordered endpoints' receiver saw per endpoint and
// key.
type orderLog struct {
	mu         sync.Mutex
	latest     map[string]int          // endpoint/key → latest version received
	seen       map[string]map[int]bool // endpoint/key → versions received
	received   int
	duplicates int
	outOfOrder int
}

func (l *orderLog) record(ep, key string, v int) {
	k := ep + "/" + key
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen[k] == nil {
		l.seen[k] = map[int]bool{}
	}
	switch {
	case l.seen[k][v]:
		l.duplicates++
		// A resend after a kill is of the version the killed reader had
		// sent and not acked: the latest. An older one came out of order.
		if v < l.latest[k] {
			l.outOfOrder++
		}
	default:
		l.received++
		if v != l.latest[k]+1 {
			l.outOfOrder++
		}
		l.seen[k][v] = true
		l.latest[k] = max(l.latest[k], v)
	}
}

func (l *orderLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.received
}

// deliveryOrder runs Instances instances with OrderedEndpoints ordered
// endpoints on the same events, and SIGKILLs the last instance once
// KillAt of the deliveries arrived.
func deliveryOrder(ctx context.Context, o *DeliveryOptions) (*DeliveryOrderResult, string, error) {
	log := &orderLog{latest: map[string]int{}, seen: map[string]map[int]bool{}}
	rcv, err := startReceiver(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b benchBody
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		log.record(strings.TrimPrefix(r.URL.Path, "/"), b.Key, b.V)
		w.WriteHeader(http.StatusNoContent)
	}))
	if err != nil {
		return nil, "", err
	}
	defer rcv.down()
	events := o.Keys * o.Versions
	res := &DeliveryOrderResult{Instances: o.Instances, Endpoints: o.OrderedEndpoints, Events: events, Expected: events * o.OrderedEndpoints}
	endpoints := make([]deliveryEndpoint, o.OrderedEndpoints)
	for i := range endpoints {
		name := fmt.Sprintf("o%d", i)
		endpoints[i] = deliveryEndpoint{name: name, url: rcv.url("/" + name), subject: "events.bench.order", ordered: true, keyHeader: keyHeader}
	}
	logs, err := withEnv(ctx, o, endpoints, func(env *deliveryEnv) (bool, error) {
		var last *clusterInstance
		for i := range o.Instances {
			in, err := env.instance(fmt.Sprintf("hb%d", i+1), "relay", "delivery")
			if err != nil {
				return false, err
			}
			if err := env.start(ctx, in); err != nil {
				return false, err
			}
			last = in
		}
		if err := env.awaitDurables(ctx, len(endpoints)); err != nil {
			return false, err
		}
		fmt.Fprintf(o.Progress, "delivery order: %d instances, %d ordered endpoints, %d keys × %d versions at %.0f/s\n",
			o.Instances, o.OrderedEndpoints, o.Keys, o.Versions, o.Rate)
		killAt := int(o.KillAt * float64(res.Expected))
		var killed time.Time
		var killErr error
		var wg sync.WaitGroup
		killCtx, stopKill := context.WithCancel(ctx)
		defer stopKill()
		wg.Go(func() {
			for log.count() < killAt {
				select {
				case <-killCtx.Done():
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
			res.KilledAt = log.count()
			killed = time.Now()
			killErr = last.kill()
			fmt.Fprintf(o.Progress, "delivery order: %s killed (SIGKILL) at %d of %d deliveries\n", last.name, res.KilledAt, res.Expected)
		})
		// Version by version over the keys: a key's versions in order of
		// commit, which the relay keeps per ordering key.
		err := env.pace(ctx, o.Rate, events, func(i int) publisher.Message {
			key, v := fmt.Sprintf("k%d", i%o.Keys), i/o.Keys+1
			return publisher.Message{ID: fmt.Sprintf("ord-%s-%d", key, v), Subject: "events.bench.order", OrderingKey: key,
				Header:  map[string]string{keyHeader: key},
				Payload: benchBody{Type: "bench.order", Key: key, V: v}.bytes()}
		})
		if err != nil {
			return false, err
		}
		complete := awaitCount(ctx, res.Expected, o.Settle, log.count)
		stopKill()
		wg.Wait()
		if killErr != nil {
			return false, killErr
		}
		if killed.IsZero() {
			return false, errors.New("the kill was not made before the deliveries ended")
		}
		res.KillToAllSeconds = time.Since(killed).Seconds()
		log.mu.Lock()
		res.Received, res.Duplicates, res.OutOfOrder = log.received, log.duplicates, log.outOfOrder
		log.mu.Unlock()
		return !complete || res.OutOfOrder > 0, nil
	})
	return res, logs, err
}

// deliveryOutage sends at Rate for 1.5 × Outage and takes the receiver
// down from a quarter of Outage to 1.25 × Outage; every event must
// arrive once it is back, with no dead letter.
func deliveryOutage(ctx context.Context, o *DeliveryOptions) (*DeliveryOutageResult, string, error) {
	var mu sync.Mutex
	seen := map[string]bool{}
	var lastFirst time.Time
	dups := 0
	rcv, err := startReceiver(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		id := r.Header.Get("webhook-id")
		mu.Lock()
		if seen[id] {
			dups++
		} else {
			seen[id] = true
			lastFirst = time.Now()
		}
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	if err != nil {
		return nil, "", err
	}
	defer rcv.down()
	received := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}
	sendFor := o.Outage * 3 / 2
	events := max(1, int(o.Rate*sendFor.Seconds()))
	res := &DeliveryOutageResult{OutageSeconds: o.Outage.Seconds(), Events: events}
	ep := deliveryEndpoint{name: "out", url: rcv.url("/out"), subject: "events.bench.out"}
	logs, err := withEnv(ctx, o, []deliveryEndpoint{ep}, func(env *deliveryEnv) (bool, error) {
		hb, err := env.instance("hb1", "relay", "delivery")
		if err != nil {
			return false, err
		}
		if err := env.start(ctx, hb); err != nil {
			return false, err
		}
		if err := env.awaitDurables(ctx, 1); err != nil {
			return false, err
		}
		fmt.Fprintf(o.Progress, "delivery outage: %d events at %.0f/s, the receiver down for %s from %s\n", events, o.Rate, o.Outage, o.Outage/4)
		start := time.Now()
		var downAt, upAt time.Time
		var outageErr error
		var wg sync.WaitGroup
		wg.Go(func() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(o.Outage / 4):
			}
			downAt = time.Now()
			if err := rcv.down(); err != nil {
				outageErr = err
			}
			fmt.Fprintf(o.Progress, "delivery outage: receiver down at %.1fs (%d received)\n", time.Since(start).Seconds(), received())
			select {
			case <-ctx.Done():
				return
			case <-time.After(o.Outage):
			}
			upAt = time.Now()
			outageErr = errors.Join(outageErr, rcv.up())
			fmt.Fprintf(o.Progress, "delivery outage: receiver back at %.1fs (%d received)\n", time.Since(start).Seconds(), received())
		})
		var enqueueTimes []time.Time
		err = env.pace(ctx, o.Rate, events, func(i int) publisher.Message {
			enqueueTimes = append(enqueueTimes, time.Now())
			return publisher.Message{ID: fmt.Sprintf("out-%d", i), Subject: "events.bench.out", Payload: benchBody{Type: "bench.outage"}.bytes()}
		})
		wg.Wait()
		if err != nil {
			return false, err
		}
		if outageErr != nil {
			return false, outageErr
		}
		for _, t := range enqueueTimes {
			if t.After(downAt) && t.Before(upAt) {
				res.DuringOutage++
			}
		}
		complete := awaitCount(ctx, events, o.Settle, received)
		mu.Lock()
		res.Received, res.Duplicates = len(seen), dups
		if complete {
			res.BackToAllSeconds = lastFirst.Sub(upAt).Seconds()
		}
		mu.Unlock()
		if res.DeadLetters, err = env.deadLetters(ctx); err != nil {
			return false, fmt.Errorf("count dead letters: %w", err)
		}
		return !complete || res.DeadLetters > 0, nil
	})
	return res, logs, err
}
