package admin

import (
	"errors"
	"net/http"
	"time"

	"github.com/hookbridge/hookbridge/internal/errtext"
	"github.com/hookbridge/hookbridge/internal/ops"
	"github.com/hookbridge/hookbridge/internal/store"
)

func (h *Handler) status(w http.ResponseWriter, r *http.Request) error {
	st, err := h.o.Ops.Status(r.Context(), h.o.Ready)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

func (h *Handler) listDeadLetters(w http.ResponseWriter, r *http.Request) error {
	limit, before, err := page(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	list, err := h.o.Ops.ListDeadLetters(r.Context(), ops.DeadLetterPage{
		Consumer: q.Get("consumer"), EventType: q.Get("type"), Resolved: store.Resolved(q.Get("resolved")),
		Before: before, Limit: limit,
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func (h *Handler) getDeadLetter(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	d, err := h.o.Ops.ShowDeadLetter(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}

// requeueDeadLetter requeues one dead letter. One that a later event of
// its ordering key has passed is refused (409, audited) unless the body
// says {"out_of_order": true}.
func (h *Handler) requeueDeadLetter(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	var req struct {
		OutOfOrder bool `json:"out_of_order"`
	}
	if err := decode(r, &req); err != nil {
		return err
	}
	target := idTarget("dead-letter", id)
	res, err := h.o.Ops.RequeueDeadLetter(r.Context(), id, ops.RequeueOptions{OutOfOrder: req.OutOfOrder})
	var passed *ops.PassedError
	if errors.As(err, &passed) {
		h.audit(r, "dead-letter.requeue", target, "refused", "reason", "passed", "stream_seq", passed.StreamSeq,
			"passed_by_event", passed.PassedBy.EventID, "passed_by_seq", passed.PassedBy.StreamSeq)
		return httpError{http.StatusConflict, err.Error() + `; nothing was applied. To apply it anyway, after that event, send {"out_of_order": true}`}
	}
	if err != nil {
		h.audit(r, "dead-letter.requeue", target, "failed", "err", err.Error())
		return err
	}
	attrs := []any{"stream_seq", res.StreamSeq, "outcome", res.Outcome}
	if res.OutOfOrder {
		attrs = append(attrs, "out_of_order", true, "passed_by_event", res.PassedBy.EventID, "passed_by_seq", res.PassedBy.StreamSeq)
	}
	h.audit(r, "dead-letter.requeue", target, res.Status, attrs...)
	writeJSON(w, http.StatusOK, res)
	return nil
}

func (h *Handler) discardDeadLetter(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	var req struct {
		Reason string `json:"reason"`
	}
	if err := decode(r, &req); err != nil {
		return err
	}
	status, err := h.o.Ops.DiscardDeadLetter(r.Context(), id, req.Reason)
	if err != nil {
		return err
	}
	h.audit(r, "dead-letter.discard", idTarget("dead-letter", id), status)
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "status": status})
	return nil
}

func (h *Handler) listConflicts(w http.ResponseWriter, r *http.Request) error {
	limit, before, err := page(r)
	if err != nil {
		return err
	}
	list, err := h.o.Ops.ListConflicts(r.Context(), ops.ConflictPage{
		Resolved: store.Resolved(r.URL.Query().Get("resolved")), Before: before, Limit: limit,
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func (h *Handler) getConflict(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	c, err := h.o.Ops.ShowConflict(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, c)
	return nil
}

func (h *Handler) resolveConflict(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	var req struct {
		Resolution string `json:"resolution"`
	}
	if err := decode(r, &req); err != nil {
		return err
	}
	status, err := h.o.Ops.ResolveConflict(r.Context(), id, req.Resolution)
	if err != nil {
		return err
	}
	h.audit(r, "conflict.resolve", idTarget("conflict", id), status)
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "status": status})
	return nil
}

func (h *Handler) listOutbox(w http.ResponseWriter, r *http.Request) error {
	limit, before, err := page(r)
	if err != nil {
		return err
	}
	state := r.URL.Query().Get("state")
	if state == "" {
		state = "dead"
	}
	list, err := h.o.Ops.ListOutbox(r.Context(), state, before, limit)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func (h *Handler) requeueOutbox(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	if err := decode(r, &struct{}{}); err != nil {
		return err
	}
	status, err := h.o.Ops.RequeueOutbox(r.Context(), id)
	if err != nil {
		return err
	}
	h.audit(r, "outbox.requeue", idTarget("outbox", id), status)
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "status": status})
	return nil
}

func (h *Handler) event(w http.ResponseWriter, r *http.Request) error {
	life, err := h.o.Ops.EventLife(r.Context(), r.PathValue("source"), r.PathValue("event_id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, life)
	return nil
}

func (h *Handler) pause(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		Until *time.Time `json:"until"`
	}
	if err := decode(r, &req); err != nil {
		return err
	}
	var until time.Time
	if req.Until != nil {
		until = *req.Until
	}
	name := r.PathValue("name")
	res, err := h.o.Ops.Pause(r.Context(), name, until)
	if err != nil {
		return err
	}
	h.audit(r, "consumer.pause", "consumer/"+name, "paused", "until", res.Until)
	writeJSON(w, http.StatusOK, res)
	return nil
}

func (h *Handler) resume(w http.ResponseWriter, r *http.Request) error {
	if err := decode(r, &struct{}{}); err != nil {
		return err
	}
	name := r.PathValue("name")
	res, err := h.o.Ops.Resume(r.Context(), name)
	if err != nil {
		return err
	}
	h.audit(r, "consumer.resume", "consumer/"+name, "resumed")
	writeJSON(w, http.StatusOK, res)
	return nil
}

// deleteDurable deletes a durable on HOOKS no configured consumer owns;
// a refused or failed delete is audited too.
func (h *Handler) deleteDurable(w http.ResponseWriter, r *http.Request) error {
	if err := decode(r, &struct{}{}); err != nil {
		return err
	}
	name := r.PathValue("name")
	res, err := h.o.Ops.DeleteDurable(r.Context(), name)
	if err != nil {
		h.audit(r, "consumer.delete", "consumer/"+name, "failed", "err", errtext.Short(err.Error()))
		return err
	}
	h.audit(r, "consumer.delete", "consumer/"+name, "deleted", "durables", res.Deleted, "ack_floor_seq", res.AckFloorSeq,
		"pending", res.Pending, "ack_pending", res.AckPending)
	writeJSON(w, http.StatusOK, res)
	return nil
}

func idTarget(kind string, id int64) string { return kind + "/" + itoa(id) }
