package admin

import (
	"net/http"
	"strconv"
	"time"

	"github.com/hookbridge/hookbridge/internal/ops"
)

// The delivery endpoints' routes (docs/DELIVERY.md, "Operations"): the
// views and actions of package ops, as `hookbridge endpoints` runs them.

func (h *Handler) listEndpoints(w http.ResponseWriter, r *http.Request) error {
	list, err := h.o.Ops.EndpointList(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func (h *Handler) getEndpoint(w http.ResponseWriter, r *http.Request) error {
	v, err := h.o.Ops.Endpoint(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

// disableEndpoint disables an endpoint; the body may say
// {"reason": "…"}.
func (h *Handler) disableEndpoint(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		Reason string `json:"reason"`
	}
	if err := decode(r, &req); err != nil {
		return err
	}
	name := r.PathValue("name")
	res, err := h.o.Ops.EndpointDisable(r.Context(), name, req.Reason)
	if err != nil {
		h.audit(r, "endpoint.disable", "endpoint/"+name, "failed", "err", err.Error())
		return err
	}
	h.audit(r, "endpoint.disable", "endpoint/"+name, res.State, "changed", res.Changed, "reason", req.Reason)
	writeJSON(w, http.StatusOK, res)
	return nil
}

func (h *Handler) enableEndpoint(w http.ResponseWriter, r *http.Request) error {
	if err := decode(r, &struct{}{}); err != nil {
		return err
	}
	name := r.PathValue("name")
	res, err := h.o.Ops.EndpointEnable(r.Context(), name)
	if err != nil {
		h.audit(r, "endpoint.enable", "endpoint/"+name, "failed", "err", err.Error())
		return err
	}
	h.audit(r, "endpoint.enable", "endpoint/"+name, res.State, "changed", res.Changed)
	writeJSON(w, http.StatusOK, res)
	return nil
}

// testEndpoint posts one signed test event to the endpoint and answers
// 200 with its outcome, whatever the endpoint answered.
func (h *Handler) testEndpoint(w http.ResponseWriter, r *http.Request) error {
	if err := decode(r, &struct{}{}); err != nil {
		return err
	}
	name := r.PathValue("name")
	res, err := h.o.Ops.EndpointTest(r.Context(), name)
	if err != nil {
		return err
	}
	h.audit(r, "endpoint.test", "endpoint/"+name, res.Class, "status", res.Status)
	writeJSON(w, http.StatusOK, res)
	return nil
}

// replayEndpoint queues events of EVENTS for one endpoint again.
func (h *Handler) replayEndpoint(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		FromSeq  uint64     `json:"from_seq"`
		ToSeq    uint64     `json:"to_seq"`
		Since    *time.Time `json:"since"`
		Until    *time.Time `json:"until"`
		Subject  string     `json:"subject"`
		EventIDs []string   `json:"event_ids"`
		Limit    int        `json:"limit"`
		DryRun   bool       `json:"dry_run"`
	}
	if err := decode(r, &req); err != nil {
		return err
	}
	sel := ops.EndpointReplaySelector{FromSeq: req.FromSeq, ToSeq: req.ToSeq, Subject: req.Subject, EventIDs: req.EventIDs, Limit: req.Limit}
	if req.Since != nil {
		sel.Since = *req.Since
	}
	if req.Until != nil {
		sel.Until = *req.Until
	}
	name := r.PathValue("name")
	res, err := h.o.Ops.EndpointReplay(r.Context(), name, sel, req.DryRun)
	if err != nil {
		h.audit(r, "endpoint.replay", "endpoint/"+name, "failed", "err", err.Error(), "matched", res.Matched, "queued", res.Queued)
		if res.Queued > 0 {
			// It queued some before the error: the answer says how many.
			h.partial(w, r, err, res)
			return nil
		}
		return err
	}
	if !req.DryRun {
		h.audit(r, "endpoint.replay", "endpoint/"+name, "queued", "matched", res.Matched, "queued", res.Queued)
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// listDeliveryDeadLetters lists delivery dead letters: ?endpoint=,
// ?event_id=, ?subject=, ?resolved=true (include resolved), ?limit=.
func (h *Handler) listDeliveryDeadLetters(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := ops.EndpointDeadLetterFilter{Endpoint: q.Get("endpoint"), EventID: q.Get("event_id"), Subject: q.Get("subject"),
		Resolved: q.Get("resolved") == "true"}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return httpError{http.StatusBadRequest, "limit must be a positive integer"}
		}
		f.Limit = n
	}
	list, err := h.o.Ops.EndpointDeadLetters(r.Context(), f)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// triageRequest selects delivery dead letters for a requeue or discard.
type triageRequest struct {
	IDs        []int64    `json:"ids"`
	Endpoint   string     `json:"endpoint"`
	EventID    string     `json:"event_id"`
	Subject    string     `json:"subject"`
	Since      *time.Time `json:"since"`
	Until      *time.Time `json:"until"`
	OutOfOrder bool       `json:"out_of_order"`
	DryRun     bool       `json:"dry_run"`
}

func (t triageRequest) filter() ops.EndpointDeadLetterFilter {
	f := ops.EndpointDeadLetterFilter{IDs: t.IDs, Endpoint: t.Endpoint, EventID: t.EventID, Subject: t.Subject}
	if t.Since != nil {
		f.Since = *t.Since
	}
	if t.Until != nil {
		f.Until = *t.Until
	}
	return f
}

// triageDeliveryDeadLetters requeues (discard false) or discards the
// selected delivery dead letters.
func (h *Handler) triageDeliveryDeadLetters(discard bool) func(w http.ResponseWriter, r *http.Request) error {
	action := "delivery-dead-letter.requeue"
	if discard {
		action = "delivery-dead-letter.discard"
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		var req triageRequest
		if err := decode(r, &req); err != nil {
			return err
		}
		var res ops.EndpointTriageResult
		var err error
		if discard {
			if req.OutOfOrder {
				return httpError{http.StatusBadRequest, "out_of_order is for a requeue"}
			}
			res, err = h.o.Ops.EndpointDeadLettersDiscard(r.Context(), req.filter(), req.DryRun)
		} else {
			res, err = h.o.Ops.EndpointDeadLettersRequeue(r.Context(), req.filter(), req.OutOfOrder, req.DryRun)
		}
		if err != nil {
			h.audit(r, action, "delivery-dead-letters", "failed", "err", err.Error(), "ids", res.Done)
			if len(res.Done) > 0 {
				// It requeued some before the error: the answer says which.
				h.partial(w, r, err, res)
				return nil
			}
			return err
		}
		if !req.DryRun {
			h.audit(r, action, "delivery-dead-letters", "done", "ids", res.Done, "refused", res.Refused, "raced", res.Raced)
		}
		writeJSON(w, http.StatusOK, res)
		return nil
	}
}

// deliveries is an outgoing event's delivery history per endpoint.
func (h *Handler) deliveries(w http.ResponseWriter, r *http.Request) error {
	hist, err := h.o.Ops.DeliveryHistory(r.Context(), r.PathValue("event_id"))
	if err != nil {
		return err
	}
	if len(hist.Endpoints) == 0 {
		return httpError{http.StatusNotFound, "no endpoint has a delivery of this event"}
	}
	writeJSON(w, http.StatusOK, hist)
	return nil
}

// partial answers an action that failed after it changed something: the
// error's status and message, and in "result" what it did all the same.
func (h *Handler) partial(w http.ResponseWriter, r *http.Request, err error, res any) {
	code, msg := h.errorStatus(r, err)
	writeJSON(w, code, struct {
		Error  string `json:"error"`
		Result any    `json:"result"`
	}{msg, res})
}
