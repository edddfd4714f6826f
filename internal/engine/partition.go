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

	"github.com/nats-io/nats.go"
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
		cons, err := g.js.CreateOrUpdateConsumer(ctx, stream.Hooks, g.durableConfig(p))
		if refused(err) {
			g.failed(fmt.Errorf("consumer %s: create durable %s: %w", g.c.opts.Name, name, err))
			break
		}
		if err == nil {
			pin, err = g.pull(ctx, cons, p)
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

// puller is one partition's pulls: what it knows of the pin and the
// deliveries it got, to tell when the partition must be gated.
type puller struct {
	g    *group
	cons jetstream.Consumer
	p    int
	// pin is the pin id the last message named; dseq the last delivery
	// sequence; epoch the scheduler's fence epoch seen.
	pin    string
	dseq   uint64
	epoch  uint64
	checks conc.WaitGroup
	ctx    context.Context
}

// pull feeds partition p's messages to the scheduler until ctx ends
// (after the pull in flight brings what it has) or the durable is gone.
// Each pull asks for the room the partition has here, so what the server
// sends always fits. It returns the pin it held last.
func (g *group) pull(ctx context.Context, cons jetstream.Consumer, p int) (string, error) {
	checkCtx, cancelChecks := context.WithCancel(ctx)
	pl := &puller{g: g, cons: cons, p: p, ctx: checkCtx, epoch: g.sched.fenceEpoch.Load()}
	defer func() { cancelChecks(); pl.checks.Wait() }()
	delay := 100 * time.Millisecond
	for ctx.Err() == nil {
		g.c.gate.wait(ctx)
		room := g.sched.waitRoom(ctx, p, g.partitionWindow())
		if ctx.Err() != nil {
			break
		}
		err := pl.fetch(room)
		switch {
		case err == nil, errors.Is(err, jetstream.ErrPinIDMismatch):
			delay = 100 * time.Millisecond
			continue
		case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound):
			return pl.pin, fmt.Errorf("consumer %s partition %d: pull: %w", g.c.opts.Name, p, err)
		}
		g.log.Warn("pull failed", "consumer", g.c.opts.Name, "partition", p, "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
	return pl.pin, nil
}

// fetch makes one pull of at most room messages and hands them over.
func (pl *puller) fetch(room int) error {
	batch, err := pl.cons.Fetch(room, jetstream.FetchMaxWait(pullWait), jetstream.FetchMaxBytes(partitionBytes),
		jetstream.FetchPriorityGroup(priorityGroup))
	if err != nil {
		return err
	}
	for msg := range batch.Messages() {
		pl.observe(msg)
		pl.g.sched.arrive(pl.p, msg)
	}
	if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
		return err
	}
	return nil
}

// observe gates the partition before msg is handed over when messages
// older than it may be held elsewhere or come back later:
//   - it is the first delivery this puller sees (a takeover);
//   - deliveries were lost: a gap in the delivery sequence, which counts
//     every delivery of the durable whoever got it (a reconnect, a pull
//     given up before its messages came, or another member pinned in
//     between);
//   - a fence dropped what this member held.
//
// A new pin without a gap needs nothing: no delivery went elsewhere in
// between (the pin lapses while a full partition does not pull, and the
// same member is pinned again). After a new pin with a gap, or a fence,
// what this member held before may be another's now, so it is dropped.
func (pl *puller) observe(msg jetstream.Msg) {
	var dseq uint64
	if md, err := msg.Metadata(); err == nil {
		dseq = md.Sequence.Consumer
	}
	pin, epoch := msg.Headers().Get(pinHeader), pl.g.sched.fenceEpoch.Load()
	fresh := pl.dseq == 0
	gap := !fresh && dseq != pl.dseq+1
	fenced := epoch != pl.epoch
	repinned := pin != pl.pin
	pl.pin, pl.epoch, pl.dseq = pin, epoch, dseq
	if !fresh && !gap && !fenced {
		return
	}
	gen := pl.g.sched.gens.Add(1)
	pl.g.sched.gate(pl.p, gen, fresh || fenced || (gap && repinned))
	pl.checks.Go(func() { pl.g.awaitTakeover(pl.ctx, pl.cons, pl.p, gen) })
}

// awaitTakeover opens partition p (check gen), which this member was just
// pinned to or lost deliveries of. When JetStream counts no more unacked
// messages of it than this member holds, nothing is held elsewhere: it
// opens at once. Else the messages held elsewhere are among those between
// the durable's ack floor and its last delivery that are not here; of
// these, the ones the inbox shows applied hold nothing back. The keys of
// the rest wait (they come back after ack_wait, or are found acked on a
// later look), and every other key goes on at once.
func (g *group) awaitTakeover(ctx context.Context, cons jetstream.Consumer, p int, gen uint64) {
	delay := 50 * time.Millisecond
	start := time.Now()
	var waiting []foreignMsg
	looks, opened, logged := 0, false, false
	for ctx.Err() == nil {
		if info, here, err := g.pendingElsewhere(ctx, cons, p); err == nil {
			looks++
			switch {
			case info.NumAckPending <= here:
				if !opened {
					g.seedDead(ctx, p)
					g.sched.open(p, gen)
				} else if len(waiting) > 0 {
					g.sched.resolve(p, seqsOf(waiting))
				}
				if logged {
					g.log.Info("partition taken over", "consumer", g.c.opts.Name, "partition", p, "waited", time.Since(start).Round(time.Millisecond))
				}
				return
			case !opened && looks > 1:
				// The first look may count this member's own deliveries
				// still on their way; past it, read what is missing.
				if foreign, err := g.foreignUnapplied(ctx, info, p); err == nil {
					g.seedDead(ctx, p)
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
						"consumer", g.c.opts.Name, "partition", p, "elsewhere", info.NumAckPending-here, "err", err)
				}
			case opened:
				// Done once every foreign message is below the ack floor:
				// under steady traffic the counts above rarely agree, and
				// looking on would read the durable's state every second
				// for as long as the partition is served.
				if waiting = g.recheckForeign(p, info.AckFloor.Stream, waiting); len(waiting) == 0 {
					if !logged {
						return
					}
					g.log.Info("partition taken over", "consumer", g.c.opts.Name, "partition", p, "waited", time.Since(start).Round(time.Millisecond))
					return
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
	}
}

// seedDead hands the scheduler the dead letters of p's keys that no
// later event has passed yet, read as a gate opens: by then a member that
// served p before has committed the dead letters of its last batches, so
// the first later event applied here marks them passed.
func (g *group) seedDead(ctx context.Context, p int) {
	refs, err := g.c.unpassedDeadLetters(ctx, p, g.partitions)
	if err != nil {
		g.log.Warn("partition: could not read its dead letters; a later event will not mark them passed",
			"consumer", g.c.opts.Name, "partition", p, "err", errtext.ForLog(err))
		return
	}
	if len(refs) > 0 {
		g.sched.seedDead(p, refs)
	}
}

// pendingElsewhere reads the durable's state and how many of its unacked
// messages this member surely holds: those that arrived before the
// request, less those settled by the time of the answer. A message that
// arrives meanwhile is not counted here, one acked meanwhile is, so the
// count errs on the side of waiting.
func (g *group) pendingElsewhere(ctx context.Context, cons jetstream.Consumer, p int) (*jetstream.ConsumerInfo, int, error) {
	c := &g.sched.counters[p]
	arrived := c.arrived.Load()
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, 0, err
	}
	return info, int(int64(arrived) - int64(c.settled.Load())), nil
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
			found = append(found, ref{foreignMsg{m.Sequence, orderKey(m.Header.Get(stream.HeaderSource), m.Header.Get(stream.HeaderOrderingKey))},
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
		got, err := store.InboxFindApplied(ctx, g.c.pool, g.c.opts.Name, source, ids)
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
func (g *group) recheckForeign(p int, floor uint64, waiting []foreignMsg) []foreignMsg {
	var done []uint64
	var rest []foreignMsg
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
