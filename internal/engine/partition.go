package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc"

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
	wg.Go(func() { g.watchLease(ctx) })
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

// watchLease fences the scheduler while this member's lease may have
// expired (its heartbeats fail: NATS is unreachable), so that it applies
// nothing the member that took its partitions over gets back; the fence
// lifts with the next heartbeat.
func (g *group) watchLease(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			g.sched.fence(g.members.leaseLost())
		}
	}
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
	var pin string
	delay := 250 * time.Millisecond
	for ctx.Err() == nil {
		d, err := ensureDurable(ctx, g.js, stream.Hooks, g.durableConfig(p), g.log)
		if refused(err) {
			g.failed(fmt.Errorf("consumer %s: create durable %s: %w", g.c.opts.Name, name, err))
			break
		}
		if err == nil {
			pin, err = g.pull(ctx, d, p)
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
	g.unpin(name, pin)
}

// unpin gives the partition's pin up, so the member that serves it next
// gets it now rather than pinnedTTL after the last pull from here. Only
// this member's own pin (pin, as its messages named it) is given up: by
// the end of a drain another member may hold the pin already.
func (g *group) unpin(durable, pin string) {
	if pin == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := g.js.Stream(ctx, stream.Hooks)
	if err != nil {
		return
	}
	c, err := s.Consumer(ctx, durable)
	if err != nil {
		return
	}
	info, err := c.Info(ctx)
	if err != nil || !slices.ContainsFunc(info.PriorityGroups, func(pg jetstream.PriorityGroupState) bool { return pg.PinnedClientID == pin }) {
		return
	}
	if err := s.UnpinConsumer(ctx, durable, priorityGroup); err != nil {
		g.log.Debug("unpin partition", "durable", durable, "err", err)
	}
}

// partitionWindow is the most messages of one partition an instance
// holds at once, besides those parked behind messages another member
// held (keyed.go): an equal share of [Options.Held], the bound an unkeyed
// instance keeps, over the partitions served here, and at least a batch.
// A pull asks for the room below it. It bounds what a member that dies
// leaves to come back after ack_wait, what a drain naks, and the
// scheduler's work. A key blocked by a failure holds its later events
// within it: once they fill it, the partition's other keys wait too.
func (g *group) partitionWindow() int {
	g.mu.Lock()
	served := max(len(g.running), 1)
	g.mu.Unlock()
	o := g.c.opts
	return max(o.BatchSize, (o.Held()+served-1)/served)
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
