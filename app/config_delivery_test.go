package app

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/delivery"
)

// The delivery section reads into endpoints with their defaults, secrets
// from the environment, and a refused address is refused at start.
func TestDeliveryConfigEndpoints(t *testing.T) {
	t.Parallel()
	dir := hookbridgetest.WriteFiles(t, map[string]string{"hookbridge.yaml": `
delivery:
  endpoints:
    - name: billing
      url: https://partner.example.com/hooks
      subjects: events.billing.>
      secrets: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw
      secret_env: [NEXT_SECRET]
      ordered: true
      rate: 5
      retry: [0s, 1s, 1m]
      headers: {X-Api-Version: "2"}
      disable_after: 48h
    - name: internal
      url: http://10.0.0.1/hooks
      subjects: [events.>]
      secrets: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw
`})
	cfg, err := LoadFile(filepath.Join(dir, "hookbridge.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	env := func(k string) (string, bool) {
		if k == "NEXT_SECRET" {
			return "whsec_bmV4dC1zZWNyZXQtb2YtMjQtYnl0ZXMtIQ==", true
		}
		return "", false
	}
	eps, err := cfg.Delivery.resolved(env)
	if !errors.Is(err, delivery.ErrRefusedAddress) || !strings.Contains(err.Error(), "internal") {
		t.Fatalf("err = %v, want the private address of endpoint internal refused", err)
	}
	if strings.Contains(err.Error(), "MfKQ9r8") {
		t.Fatalf("error echoes a secret: %v", err)
	}
	if len(eps) != 1 {
		t.Fatalf("endpoints %+v, want billing only", eps)
	}
	e := eps[0]
	if e.Name != "billing" || len(e.Secrets) != 2 || !e.Ordered || e.Rate != 5 || e.Timeout != delivery.DefaultTimeout ||
		e.Concurrency != delivery.DefaultConcurrency || len(e.Retry) != 3 || e.Retry[2] != time.Minute ||
		e.Headers["X-Api-Version"] != "2" || e.Subjects[0] != "events.billing.>" || e.DisableAfter != 48*time.Hour {
		t.Fatalf("endpoint %+v", e)
	}
}

func TestDeliveryRoleIsAccepted(t *testing.T) {
	t.Parallel()
	if _, err := NewServer(Config{}, nil, []string{RoleDelivery}, quietLogger()); err != nil {
		t.Fatalf("role delivery: %v", err)
	}
}
