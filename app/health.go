package app

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"
)

// check is one readiness dependency.
type check struct {
	name string
	fn   func(ctx context.Context) error
	// roles that need this dependency; empty means every role.
	roles []string
}

func (c check) neededBy(role string) bool {
	if role == "" || len(c.roles) == 0 {
		return true
	}
	for _, r := range c.roles {
		if r == role {
			return true
		}
	}
	return false
}

// healthz answers 200 while the process serves HTTP at all.
func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
}

// readyz answers 200 only when every dependency of the running roles
// answers; the body names each one and its state (never credentials),
// and lists warnings that do not fail readiness (a durable stranding
// accepted messages).
// With ?role=ingress only that role's dependencies count, so a load
// balancer can keep sending webhooks to an all-roles instance while its
// database is down (the ingress needs NATS only).
func readyz(checks []check, warnings ...func() []string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		role := r.URL.Query().Get("role")
		switch role {
		case "", RoleIngress, RoleConsumer, RoleRelay, RoleDelivery:
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]any{"ready": false, "error": "role must be ingress, consumer, relay or delivery"})
			return
		}
		status := http.StatusOK
		out := map[string]string{}
		for _, c := range checks {
			if !c.neededBy(role) {
				continue
			}
			if err := c.fn(ctx); err != nil {
				status = http.StatusServiceUnavailable
				out[c.name] = "unavailable"
				var reason *readyReason
				if errors.As(err, &reason) {
					out[c.name] += ": " + reason.Error()
				}
				continue
			}
			out[c.name] = "ok"
		}
		body := map[string]any{"ready": status == http.StatusOK, "checks": out}
		var warned []string
		for _, f := range warnings {
			warned = append(warned, f()...)
		}
		if len(warned) > 0 {
			body["warnings"] = warned // not failures: readiness stands
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(body)
	}
}

// allReady reports whether every check answers, as /readyz without a
// role does.
func allReady(ctx context.Context, checks []check) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for _, c := range checks {
		if c.fn(ctx) != nil {
			return false
		}
	}
	return true
}
