package app

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// check is one readiness dependency.
type check struct {
	name string
	fn   func(ctx context.Context) error
}

// healthz answers 200 while the process serves HTTP at all.
func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
}

// readyz answers 200 only when every dependency of the running roles
// answers; the body names each one and its state (never credentials).
func readyz(checks []check) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		status := http.StatusOK
		out := map[string]string{}
		for _, c := range checks {
			if err := c.fn(ctx); err != nil {
				status = http.StatusServiceUnavailable
				out[c.name] = "unavailable"
				continue
			}
			out[c.name] = "ok"
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]any{"ready": status == http.StatusOK, "checks": out})
	}
}
