package admin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/hookbridge/hookbridge/internal/ops"
)

// replayRequest is the body of POST /api/v1/replay: the selectors of
// `hookbridge replay`. since and until take an RFC 3339 time or a
// duration meaning that long ago ("2h"). dry_run defaults to true.
type replayRequest struct {
	Consumer    string `json:"consumer"`
	FromSeq     uint64 `json:"from_seq"`
	ToSeq       uint64 `json:"to_seq"`
	Since       string `json:"since"`
	Until       string `json:"until"`
	Type        string `json:"type"`
	EventID     string `json:"event_id"`
	DeadLetters bool   `json:"dead_letters"`
	DryRun      *bool  `json:"dry_run"`
	// OutOfOrder, with dead_letters, also applies the dead letters a later
	// event of their ordering key has passed (left alone by default).
	OutOfOrder bool `json:"out_of_order"`
}

// dryRunItems is how many messages a dry run's answer lists, and how
// many skipped dead letters a job's summary names.
const dryRunItems = 100

// dryRunAnswer is the answer of a dry run: what the real run would do
// (the summary `hookbridge replay --dry-run --json` ends with) and the
// first [dryRunItems] messages (its lines).
type dryRunAnswer struct {
	DryRun  bool             `json:"dry_run"`
	Summary ops.ReplayResult `json:"summary"`
	Items   []ops.ReplayItem `json:"items"`
}

func (h *Handler) replay(w http.ResponseWriter, r *http.Request) error {
	var req replayRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if req.Consumer == "" {
		return httpError{http.StatusBadRequest, "consumer is required"}
	}
	now := time.Now()
	since, err := ops.ParseWhen(req.Since, now)
	if err != nil {
		return err
	}
	until, err := ops.ParseWhen(req.Until, now)
	if err != nil {
		return err
	}
	sel := ops.ReplaySelectors{FromSeq: req.FromSeq, ToSeq: req.ToSeq, Since: since, Until: until, Type: req.Type,
		EventID: req.EventID, DeadLetters: req.DeadLetters, DryRun: req.DryRun == nil || *req.DryRun, OutOfOrder: req.OutOfOrder}
	// Checked before answering, so a wrong selector is a 400 rather than
	// a failed job.
	plan, err := h.o.Ops.PlanReplay(req.Consumer, sel)
	if err != nil {
		return err
	}
	if sel.DryRun {
		items := []ops.ReplayItem{}
		res, err := h.o.Ops.RunReplay(r.Context(), plan, ops.ReplayHooks{Report: func(it ops.ReplayItem) {
			if len(items) < dryRunItems {
				items = append(items, it)
			}
		}})
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, dryRunAnswer{DryRun: true, Summary: res, Items: items})
		return nil
	}
	job := h.jobs.start(plan)
	h.audit(r, "replay.start", "consumer/"+req.Consumer, "started", "job_id", job,
		"from_seq", sel.FromSeq, "to_seq", sel.ToSeq, "type", sel.Type, "dead_letters", sel.DeadLetters, "out_of_order", sel.OutOfOrder)
	writeJSON(w, http.StatusAccepted, map[string]any{"job_id": job})
	return nil
}

func (h *Handler) replayJob(w http.ResponseWriter, r *http.Request) error {
	st, ok := h.jobs.get(r.PathValue("job"))
	if !ok {
		return httpError{http.StatusNotFound, "no such replay job (jobs are kept in memory by the instance that runs them)"}
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

// jobState is the answer of GET /api/v1/replay/{job_id}.
type jobState struct {
	JobID    string `json:"job_id"`
	Consumer string `json:"consumer"`
	State    string `json:"state"` // running, done or failed
	Done     int    `json:"done"`
	Total    uint64 `json:"total"`
	Error    string `json:"error"`
	// Summary counts the outcomes once the job has ended, and names the
	// first [dryRunItems] of the dead letters it left alone because a
	// later event of their ordering key had passed them; SkippedPassed
	// counts those.
	Summary       *ops.ReplayResult `json:"summary,omitempty"`
	SkippedPassed int               `json:"skipped_passed"`
	Started       time.Time         `json:"started_at"`
}

// maxJobs is how many replay jobs are remembered; the oldest ended ones
// are forgotten first.
const maxJobs = 100

// jobs runs real replays in the background, so a long one outlives the
// request that started it; they stop when the handler is closed.
type jobs struct {
	ops    *ops.Ops
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	byID  map[string]*jobState
	order []string
}

func newJobs(o *ops.Ops, log *slog.Logger) *jobs {
	ctx, cancel := context.WithCancel(context.Background())
	return &jobs{ops: o, log: log, ctx: ctx, cancel: cancel, byID: map[string]*jobState{}}
}

func (j *jobs) start(plan *ops.ReplayPlan) string {
	name := plan.Consumer()
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand does not fail on supported platforms
	id := hex.EncodeToString(b[:])
	st := &jobState{JobID: id, Consumer: name, State: "running", Started: time.Now().UTC()}
	j.mu.Lock()
	j.byID[id] = st
	j.order = append(j.order, id)
	j.forgetOld()
	j.mu.Unlock()
	j.wg.Add(1)
	go func() {
		defer j.wg.Done()
		res, err := j.run(plan, st)
		j.mu.Lock()
		defer j.mu.Unlock()
		st.SkippedPassed = len(res.SkippedPassed)
		res.SkippedPassed = res.SkippedPassed[:min(len(res.SkippedPassed), dryRunItems)]
		st.Summary = &res
		sum := res.ReplaySummary
		st.Total = max(st.Total, uint64(st.Done))
		switch {
		case err != nil:
			st.State, st.Error = "failed", err.Error()
		case sum.Failed > 0:
			st.State, st.Error = "failed", strconv.Itoa(sum.Failed)+" event(s) failed; see the consumer's dead letters"
		default:
			st.State = "done"
		}
		j.log.Info("admin replay ended", "job_id", id, "consumer", name, "state", st.State, "selected", sum.Selected,
			"processed", sum.Processed, "duplicate", sum.Duplicate, "failed", sum.Failed, "held", sum.Held, "skipped_passed", st.SkippedPassed)
	}()
	return id
}

func (j *jobs) run(plan *ops.ReplayPlan, st *jobState) (ops.ReplayResult, error) {
	return j.ops.RunReplay(j.ctx, plan, ops.ReplayHooks{
		Planned: func(n uint64) {
			j.mu.Lock()
			st.Total = n
			j.mu.Unlock()
		},
		Report: func(ops.ReplayItem) {
			j.mu.Lock()
			st.Done++
			j.mu.Unlock()
		},
	})
}

// forgetOld drops the oldest ended jobs beyond maxJobs (j.mu held).
func (j *jobs) forgetOld() {
	for len(j.order) > maxJobs {
		dropped := false
		for i, id := range j.order {
			if j.byID[id].State != "running" {
				delete(j.byID, id)
				j.order = append(j.order[:i], j.order[i+1:]...)
				dropped = true
				break
			}
		}
		if !dropped {
			return
		}
	}
}

func (j *jobs) get(id string) (jobState, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	st, ok := j.byID[id]
	if !ok {
		return jobState{}, false
	}
	return *st, true
}

func (j *jobs) close() {
	j.cancel()
	j.wg.Wait()
}
