package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc"

	"github.com/hookbridge/hookbridge/internal/errtext"
	"github.com/hookbridge/hookbridge/internal/store"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// Partitioned consumption of a keyed consumer (docs/DESIGN.md, "Order").
// Every partition of HOOKS's keyed messages has a durable of its own per
// consumer, in a priority group whose policy pins one client at a time;
// the instances split the partitions between them (members.go) and the
// scheduler (keyed.go) applies them key by key.

// priorityGroup is the one priority group of a partition durable.
const priorityGroup = "hookbridge"

// pinHeader is the header in which JetStream names the pinned client a
// message was delivered to.
const pinHeader = "Nats-Pin-Id"

// Pull requests of a partition: short-lived, so a pinned client keeps
// renewing its pin well inside pinnedTTL, and a member that dies without
// a word loses its pin pinnedTTL after its last pull.
const (
	partitionPullExpiry = 5 * time.Second
	pinnedTTL           = 3 * partitionPullExpiry
)

// partitionBytes bounds the bytes one partition's pulls bring in at once.
const partitionBytes = 16 << 20

// group runs one keyed consumer's partitions on this instance.
type group struct {
	c          *Consumer
	js         jetstream.JetStream
	partitions int
	sched      *keyedScheduler
	members    *membership
	log        *slog.Logger

	mu      sync.Mutex
	running map[int]*partitionRun
	// leaving are partitions being drained; one that comes back waits
	// for its drain to end.
	leaving map[int]*partitionRun
	// failed stops the group with the cause (set by run).
	failed context.CancelCauseFunc
}

type partitionRun struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func newGroup(c *Consumer, js jetstream.JetStream) *group {
	o := c.opts
	a := &applier{pool: c.pool, consumer: o.Name, h: o.Handler, timeout: o.HandlerTimeout, keyed: true}
	s := newKeyedScheduler(o.Name, o.Partitions, o.Concurrency, o.BatchSize, o.AckWait, o.Logger)
	s.process = func(ctx context.Context, msgs []jetstream.Msg) []action { return c.processWith(ctx, a, msgs) }
	s.passed = c.recordPassed
	return &group{c: c, js: js, partitions: o.Partitions, sched: s, log: o.Logger,
		members: newMembership(js, o.Name, o.Logger), running: map[int]*partitionRun{}, leaving: map[int]*partitionRun{}}
}

// run serves this instance's share of the partitions until ctx ends, then
// drains them (what is here is applied, or nak'd for the next member) and
// leaves the group. It returns an error when the server refuses a
// partition durable's configuration, which no retry changes.
func (g *group) run(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	g.failed = cancel
	stop := make(chan struct{})
	var wg conc.WaitGroup
	wg.Go(func() { g.sched.run(stop, context.WithoutCancel(ctx)) })
	g.awaitLegacy(ctx)
	g.members.run(ctx, func(members []string) { g.rebalance(ctx, members) })
	// The member key is gone: the others start pulling these partitions
	// and get them as each is drained here and unpinned.
	g.stopAll()
	close(stop)
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// rebalance starts the partitions members assigns to this instance and
// drains the ones it no longer does.
func (g *group) rebalance(ctx context.Context, members []string) {
	want := assign(members, g.members.id, g.partitions)
	g.members.serving(want)
	g.mu.Lock()
	wanted := map[int]bool{}
	for _, p := range want {
		wanted[p] = true
		if g.running[p] == nil {
			pctx, cancel := context.WithCancel(ctx)
			run := &partitionRun{cancel: cancel, done: make(chan struct{})}
			g.running[p] = run
			prev := g.leaving[p]
			delete(g.leaving, p)
			go func() {
				defer close(run.done)
				if prev != nil {
					<-prev.done
				}
				g.servePartition(pctx, p)
			}()
		}
	}
	var leaving []*partitionRun
	for p, run := range g.running {
		if !wanted[p] {
			leaving = append(leaving, run)
			delete(g.running, p)
			g.leaving[p] = run
		}
	}
	g.mu.Unlock()
	g.log.Info("consumer partitions assigned", "consumer", g.c.opts.Name, "members", len(members), "partitions", len(want))
	for _, run := range leaving {
		run.cancel()
	}
	// Not waited for: a partition drains while the others go on.
}

func (g *group) stopAll() {
	g.mu.Lock()
	runs := make([]*partitionRun, 0, len(g.running)+len(g.leaving))
	for p, run := range g.running {
		runs = append(runs, run)
		delete(g.running, p)
	}
	for p, run := range g.leaving {
		runs = append(runs, run)
		delete(g.leaving, p)
	}
	g.mu.Unlock()
	for _, run := range runs {
		run.cancel()
	}
	for _, run := range runs {
		<-run.done
	}
}

// durableConfig is the configuration of partition p's durable.
func (g *group) durableConfig(p int) jetstream.ConsumerConfig {
	o := g.c.opts
	return jetstream.ConsumerConfig{
		Durable:     stream.PartitionDurable(o.Name, p),
		Description: "hookbridge consumer " + o.Name + ", partition " + strconv.Itoa(p) + " of " + strconv.Itoa(g.partitions),
		AckPolicy:   jetstream.AckExplicitPolicy,
		AckWait:     o.AckWait,
		// As for the unkeyed durable: the consumer enforces MaxDeliver.
		MaxDeliver:     -1,
		MaxAckPending:  o.MaxAckPending,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		FilterSubjects: o.keyedFilterSubjects(p),
		PriorityGroups: []string{priorityGroup},
		PriorityPolicy: jetstream.PriorityPolicyPinned,
		PinnedTTL:      pinnedTTL,
		Metadata:       map[string]string{"hookbridge.consumer": o.Name, "hookbridge.partition": strconv.Itoa(p)},
	}
}

// servePartition pulls partition p into the scheduler until ctx ends,
// then drains it and gives its pin up. A pull iterator that closes while
// ctx is live is replaced, as the unkeyed runner does.
func (g *group) servePartition(ctx context.Context, p int) {
	name := stream.PartitionDurable(g.c.opts.Name, p)
	g.sched.add(p)
	if refs, err := g.c.unpassedDeadLetters(ctx, p, g.partitions); err != nil {
		g.log.Warn("partition: could not read its dead letters; a later event will not mark them passed",
			"consumer", g.c.opts.Name, "partition", p, "err", errtext.ForLog(err))
	} else if len(refs) > 0 {
		g.sched.seedDead(p, refs)
	}
	var cons jetstream.Consumer
	delay := 250 * time.Millisecond
	for ctx.Err() == nil {
		var err error
		cons, err = g.js.CreateOrUpdateConsumer(ctx, stream.Hooks, g.durableConfig(p))
		if refused(err) {
			g.failed(fmt.Errorf("consumer %s: create durable %s: %w", g.c.opts.Name, name, err))
			break
		}
		if err == nil {
			err = g.pull(ctx, cons, p)
		}
		if ctx.Err() != nil {
			break
		}
		if err == nil {
			err = errors.New("pull iterator closed (durable consumer deleted?)")
		}
		g.log.Warn("partition interrupted; re-creating it", "consumer", g.c.opts.Name, "durable", name, "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
		delay = min(2*delay, 30*time.Second)
	}
	g.sched.drain(p)
	g.unpin(name)
}

// unpin gives the partition's pin up, so the member that serves it next
// gets it now rather than pinnedTTL after the last pull from here.
func (g *group) unpin(durable string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := g.js.Stream(ctx, stream.Hooks)
	if err == nil {
		err = s.UnpinConsumer(ctx, durable, priorityGroup)
	}
	if err != nil {
		g.log.Debug("unpin partition", "durable", durable, "err", err)
	}
}

// pull feeds partition p's messages to the scheduler until the iterator
// closes (on ctx's end, after what it had buffered). Each time the pin
// changes (this instance has just been pinned) the partition is gated
// until a takeover check finds nothing of it held by another member.
func (g *group) pull(ctx context.Context, cons jetstream.Consumer, p int) error {
	window := max(2*g.c.opts.BatchSize, minPullWindow)
	it, err := cons.Messages(jetstream.PullMaxMessagesWithBytesLimit(window, partitionBytes),
		jetstream.PullExpiry(partitionPullExpiry), jetstream.PullPriorityGroup(priorityGroup))
	if err != nil {
		return fmt.Errorf("consumer %s partition %d: pull: %w", g.c.opts.Name, p, err)
	}
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-ctx.Done():
			it.Drain()
		case <-stopped:
		}
	}()
	var (
		pin    string
		gen    uint64
		checks conc.WaitGroup
	)
	defer checks.Wait()
	checkCtx, cancelChecks := context.WithCancel(ctx)
	defer cancelChecks()
	for {
		g.c.gate.wait(ctx)
		msg, err := it.Next()
		if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
			return nil
		}
		if err != nil {
			g.log.Warn("pull failed", "consumer", g.c.opts.Name, "partition", p, "err", err)
			continue
		}
		if id := msg.Headers().Get(pinHeader); id != pin {
			pin = id
			gen++
			g.sched.gate(p, gen)
			checks.Go(func() { g.awaitTakeover(checkCtx, cons, p, gen) })
		}
		g.sched.arrive(p, msg)
	}
}

// awaitTakeover opens partition p (check gen), which this member was just
// pinned to. When JetStream counts no more unacked messages of it than
// this member holds, no other member holds any: it opens at once. Else
// the messages another member may hold are those between the durable's
// ack floor and its last delivery that are not here; of these, the ones
// the inbox shows applied hold nothing back. The keys of the rest wait
// (they come back after ack_wait, or are found applied or acked on a
// later look), and every other key goes on at once.
func (g *group) awaitTakeover(ctx context.Context, cons jetstream.Consumer, p int, gen uint64) {
	delay := 50 * time.Millisecond
	start := time.Now()
	var waiting []foreignMsg // nil until the partition was opened with them
	opened, logged := false, false
	for ctx.Err() == nil {
		info, err := cons.Info(ctx)
		if err == nil {
			// Read after the server's count: a message that arrives in
			// between is counted by both, one acked in between only by the
			// server, so the test errs on the side of waiting.
			held := g.sched.heldBy(p)
			switch {
			case int64(info.NumAckPending) <= held:
				if !opened {
					g.sched.open(p, gen)
				} else if len(waiting) > 0 {
					g.sched.resolve(p, seqsOf(waiting))
				}
				if logged {
					g.log.Info("partition taken over", "consumer", g.c.opts.Name, "partition", p, "waited", time.Since(start).Round(time.Millisecond))
				}
				return
			case !opened:
				if foreign, err := g.foreignUnapplied(ctx, info, p); err == nil {
					g.sched.openForeign(p, gen, foreign)
					opened, waiting = true, foreign
					if len(foreign) > 0 {
						logged = true
						g.log.Info("partition taken over; the keys of messages another member held wait for them (they return after ack_wait)",
							"consumer", g.c.opts.Name, "partition", p, "messages", len(foreign), "keys", countKeys(foreign))
					}
				} else if !logged && time.Since(start) > time.Second {
					logged = true
					g.log.Info("partition taken over; waiting for messages another member held (they return after ack_wait)",
						"consumer", g.c.opts.Name, "partition", p, "elsewhere", int64(info.NumAckPending)-held, "err", err)
				}
			default:
				waiting = g.recheckForeign(ctx, p, info.AckFloor.Stream, waiting)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
	}
}

// maxForeignScan bounds the messages a takeover reads to find the keys
// another member held; past it the whole partition waits instead.
const maxForeignScan = 20000

var errForeignScan = errors.New("too many messages held elsewhere to read them one by one")

// foreignUnapplied reads partition p's messages between the durable's
// ack floor and its last delivery (what another member may hold), and
// returns those the inbox does not show applied.
func (g *group) foreignUnapplied(ctx context.Context, info *jetstream.ConsumerInfo, p int) ([]foreignMsg, error) {
	s, err := g.js.Stream(ctx, stream.Hooks)
	if err != nil {
		return nil, err
	}
	type ref struct {
		foreignMsg
		source, id string
	}
	var found []ref
	from, to := info.AckFloor.Stream+1, info.Delivered.Stream
	for _, subject := range g.c.opts.keyedFilterSubjects(p) {
		for seq := from; seq <= to; {
			m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("read partition %d at %d: %w", p, seq, err)
			}
			if m.Sequence > to {
				break
			}
			found = append(found, ref{foreignMsg{m.Sequence, m.Header.Get(stream.HeaderOrderingKey)},
				m.Header.Get(stream.HeaderSource), m.Header.Get(stream.HeaderEventID)})
			if len(found) > maxForeignScan {
				return nil, errForeignScan
			}
			seq = m.Sequence + 1
		}
	}
	bySource := map[string][]string{}
	for _, r := range found {
		bySource[r.source] = append(bySource[r.source], r.id)
	}
	applied := map[[2]string]bool{}
	for source, ids := range bySource {
		got, err := store.InboxApplied(ctx, g.c.pool, g.c.opts.Name, source, ids)
		if err != nil {
			return nil, fmt.Errorf("read the inbox: %w", err)
		}
		for _, id := range got {
			applied[[2]string{source, id}] = true
		}
	}
	var out []foreignMsg
	for _, r := range found {
		if !applied[[2]string{r.source, r.id}] {
			out = append(out, r.foreignMsg)
		}
	}
	return out, nil
}

// recheckForeign resolves the foreign messages now below the durable's
// ack floor and returns the rest. (Those that come back are resolved by
// the scheduler as they arrive; resolving one twice changes nothing.)
func (g *group) recheckForeign(ctx context.Context, p int, floor uint64, waiting []foreignMsg) []foreignMsg {
	var done []uint64
	rest := waiting[:0]
	for _, f := range waiting {
		if f.seq <= floor {
			done = append(done, f.seq)
		} else {
			rest = append(rest, f)
		}
	}
	if len(done) > 0 {
		g.sched.resolve(p, done)
	}
	return rest
}

func seqsOf(fs []foreignMsg) []uint64 {
	out := make([]uint64, len(fs))
	for i, f := range fs {
		out[i] = f.seq
	}
	return out
}

func countKeys(fs []foreignMsg) int {
	keys := map[string]bool{}
	for _, f := range fs {
		keys[f.key] = true
	}
	return len(keys)
}

// ReplaySubjects are the HOOKS subjects, keyed or not, of the consumer's
// sources and event types: what a replay reads.
func (o *Options) ReplaySubjects() []string {
	return append(o.FilterSubjects(), o.keyedFilterSubjects(-1)...)
}

// keyedFilterSubjects are the subjects of partition p (every partition,
// for p < 0) the consumer receives.
func (o *Options) keyedFilterSubjects(p int) []string {
	sources := o.Sources
	if len(sources) == 0 {
		sources = []string{"*"}
	}
	var out []string
	seen := map[string]bool{}
	for _, s := range sources {
		for _, t := range o.EventTypes {
			if f := stream.KeyedHookFilter(p, s, t); !seen[f] {
				seen[f] = true
				out = append(out, f)
			}
		}
	}
	return out
}
