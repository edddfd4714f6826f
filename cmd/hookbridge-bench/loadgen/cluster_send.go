package loadgen

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/hookbridge/hookbridge/bridge/verify"
)

// entity is what the sender keeps in order: an account's versions, or an
// order's two events. Its next event is sent only once the one before was
// answered 2xx, which is the order hookbridge promises to apply them in.
type entity struct {
	source string
	n      int // events
	next   int // index of the next event to send
	// event is event i's id and body, made when it is first sent.
	event func(i int, now time.Time) (id string, body []byte)
}

// ledgerEntity is account a of run runID: versions 1..versions.
func ledgerEntity(runID string, a, versions int) *entity {
	account := fmt.Sprintf("%s-a%d", runID, a)
	return &entity{source: ledgerSource, n: versions, event: func(i int, now time.Time) (string, []byte) {
		return fmt.Sprintf("%s-v%d", account, i+1), ledgerBody(account, i+1, now)
	}}
}

// orderEntity is order o of run runID: order.created, then order.paid, or
// the other way round when paidFirst.
func orderEntity(runID string, o int, paidFirst bool) *entity {
	order := fmt.Sprintf("%s-o%d", runID, o)
	return &entity{source: demoSource, n: 2, event: func(i int, now time.Time) (string, []byte) {
		if (i == 0) == paidFirst {
			return order + "-paid", PaidBody(order, o, now)
		}
		return order + "-created", OrderBody(order, o, now)
	}}
}

// progress counts the events answered 2xx and tells the faults waiting
// for a share of them.
type progress struct {
	total    int
	finished chan struct{} // closed when the sending ends

	mu    sync.Mutex
	n     int
	waits []progressWait
}

type progressWait struct {
	at int
	ch chan struct{}
}

func newProgress(total int) *progress {
	return &progress{total: total, finished: make(chan struct{})}
}

func (p *progress) add() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	kept := p.waits[:0]
	for _, w := range p.waits {
		if w.at <= p.n {
			close(w.ch)
		} else {
			kept = append(kept, w)
		}
	}
	p.waits = kept
}

// answered is how many events were answered 2xx so far.
func (p *progress) answered() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// reached is closed once the fraction frac of all events was answered 2xx.
func (p *progress) reached(frac float64) <-chan struct{} {
	at := int(math.Ceil(frac * float64(p.total)))
	ch := make(chan struct{})
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n >= at {
		close(ch)
		return ch
	}
	p.waits = append(p.waits, progressWait{at: at, ch: ch})
	return ch
}

// await waits until the fraction frac of the events was answered 2xx
// (true), or the sending ended short of it or ctx ended (false).
func (p *progress) await(ctx context.Context, frac float64) bool {
	r := p.reached(frac)
	select {
	case <-r:
		return true
	case <-ctx.Done():
		return false
	case <-p.finished:
		select {
		case <-r:
			return true
		default:
			return false
		}
	}
}

// pause holds the sending between two parts of a run: once at events
// were answered 2xx, no event is sent until resume is closed (those in
// flight still finish).
type pause struct {
	at     int
	resume chan struct{}
}

// wait returns once p lets the sending go on (true) or ctx ends (false).
func (p *pause) wait(ctx context.Context, prog *progress) bool {
	if p == nil || prog.answered() < p.at {
		return true
	}
	select {
	case <-p.resume:
		return true
	case <-ctx.Done():
		return false
	}
}

// giveUpAfter is how long the sender retries one event (network errors,
// 429 and 5xx, over every instance) before it counts it not accepted: far
// longer than any instance's restart, and what a sender's retry schedule
// of the first minutes would cover.
const giveUpAfter = 2 * time.Minute

// clusterSender posts the entities' events round robin over the
// instances' URLs.
type clusterSender struct {
	urls    []string
	secrets map[string]string
	client  *http.Client
	limiter *rate.Limiter // nil: closed loop
	prog    *progress
	// log receives a line for each event given up.
	log io.Writer
	// pause, when set, holds the sending once pause.at events were
	// answered 2xx, until pause.resume is closed.
	pause *pause

	rr        atomic.Uint64
	sent      atomic.Int64 // events whose first request was made
	accepted  [2]atomic.Int64
	requests  atomic.Int64
	dups      atomic.Int64 // answered 200: a retry found it stored
	refused   atomic.Int64 // answered 4xx other than 429
	gaveUp    atomic.Int64
	statuses  [600]atomic.Int64 // index 0: network errors
	firstSend time.Time         // set before run
	lastOK    atomic.Int64      // unix nanoseconds of the last 2xx
}

// sourceIndex is the accepted counter of a source.
func sourceIndex(source string) int {
	if source == ledgerSource {
		return 0
	}
	return 1
}

// run sends every entity's events in its order with concurrency workers,
// and returns when all are answered or given up, or ctx ends.
func (s *clusterSender) run(ctx context.Context, entities []*entity, concurrency int) {
	defer close(s.prog.finished)
	driveCtx, stop := context.WithCancel(ctx)
	defer stop()
	ready := make(chan *entity, len(entities)) // every entity fits: a worker never blocks on it
	for _, e := range entities {
		ready <- e
	}
	var open atomic.Int64
	open.Store(int64(len(entities)))
	var wg sync.WaitGroup
	for range min(concurrency, len(entities)) {
		wg.Go(func() {
			for {
				select {
				case <-driveCtx.Done():
					return
				case e := <-ready:
					if !s.pause.wait(driveCtx, s.prog) {
						return
					}
					if s.limiter != nil && s.limiter.Wait(driveCtx) != nil {
						return
					}
					if s.deliver(driveCtx, e) {
						if e.next++; e.next < e.n {
							ready <- e
							continue
						}
					}
					if open.Add(-1) == 0 {
						stop()
					}
				}
			}
		})
	}
	wg.Wait()
}

// deliver posts e's next event until it is answered 2xx (true), refused
// or given up (false: the entity's later events are not sent, since they
// would come before it).
func (s *clusterSender) deliver(ctx context.Context, e *entity) bool {
	first := time.Now()
	id, body := e.event(e.next, first)
	s.sent.Add(1)
	signedAt := first
	var signed http.Header
	for attempt := 0; ; attempt++ {
		if signed == nil || time.Since(signedAt) > 4*time.Minute {
			// A retry is the same bytes; only a signature about to leave
			// the receiver's tolerance (5 minutes) is made again.
			signedAt = time.Now()
			var err error
			if signed, err = verify.SignHeaders(verify.SchemeStandardWebhooks, s.secrets[e.source], id, signedAt, body, verify.HMACConfig{}); err != nil {
				fmt.Fprintf(s.log, "cluster: sign %s: %v\n", id, err)
				s.gaveUp.Add(1)
				return false
			}
		}
		i := int((s.rr.Add(1) - 1) % uint64(len(s.urls)))
		code, err := s.post(ctx, s.urls[i]+"/webhooks/"+e.source, body, signed)
		if ctx.Err() != nil {
			return false
		}
		s.requests.Add(1)
		s.statuses[code].Add(1)
		switch {
		case code == http.StatusAccepted || code == http.StatusOK:
			if code == http.StatusOK {
				s.dups.Add(1)
			}
			s.accepted[sourceIndex(e.source)].Add(1)
			s.lastOK.Store(time.Now().UnixNano())
			s.prog.add()
			return true
		case err != nil || code == http.StatusTooManyRequests || code >= 500:
			if time.Since(first) > giveUpAfter {
				fmt.Fprintf(s.log, "cluster: %s not accepted after %s (last: status %d, %v)\n", id, giveUpAfter, code, err)
				s.gaveUp.Add(1)
				return false
			}
			// The next instance gets the retry at once; once every one
			// failed, wait before the next round (25 ms, doubling to 1 s).
			if n := len(s.urls); attempt%n == n-1 {
				select {
				case <-ctx.Done():
					return false
				case <-time.After(min(25*time.Millisecond<<min(attempt/n, 6), time.Second)):
				}
			}
		default:
			fmt.Fprintf(s.log, "cluster: %s refused with status %d\n", id, code)
			s.refused.Add(1)
			return false
		}
	}
}

// post sends one request and returns its status (0 on a network error).
func (s *clusterSender) post(ctx context.Context, url string, body []byte, signed http.Header) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header = signed.Clone()
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}
