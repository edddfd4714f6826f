package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/selftest"
)

// selftestCmd runs the acceptance protocol against a running deployment,
// through the self-test's own source and consumer.
type selftestCmd struct {
	URL     string        `help:"Base URL of the ingress (default: http://<http-addr>)."`
	JSON    bool          `name:"json" help:"Print the report as JSON."`
	Cleanup bool          `help:"Remove the run's rows and relayed messages afterwards (they are kept under the run id otherwise), and the self-test's durable on HOOKS unless a serve consumes from it."`
	RunID   string        `name:"run-id" help:"Run id to use (default: a new one); with --cleanup-only, the run to remove."`
	Only    bool          `name:"cleanup-only" help:"Run no checks; remove the rows of --run-id (and the durable, as --cleanup)."`
	Timeout time.Duration `help:"How long each check waits for the deployment to settle." default:"20s"`
	allFlags
}

// selftestOutput is the --json output.
type selftestOutput struct {
	selftest.Report
	URL     string            `json:"url,omitempty"`
	Cleaned *selftest.Purged  `json:"cleaned,omitempty"`
	Durable *selftest.Removal `json:"durable,omitempty"`
}

// Run implements the selftest command. It fails (exit 1) unless every
// check holds.
func (c *selftestCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	src := cfg.Source(selftest.Source)
	if !cfg.Selftest.Enabled || src == nil {
		return fmt.Errorf("selftest: not enabled in this configuration; set selftest: {enabled: true, secrets: [...]} in the file serve and this command read")
	}
	js, closeJS, err := opsJetStream(ctx, cfg, natsFlags{})
	if err != nil {
		return err
	}
	defer closeJS()
	pool, err := opsPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	base := strings.TrimSuffix(c.URL, "/")
	if base == "" {
		base = "http://" + cfg.HTTPAddr
	}
	// A transport of its own, closed at the end: no keep-alive connection
	// outlives the command (tests run it in-process).
	transport := http.DefaultTransport.(*http.Transport).Clone()
	defer transport.CloseIdleConnections()
	client := &http.Client{Timeout: 30 * time.Second, Transport: transport}
	secret := src.ResolvedSecrets()[0]
	target := selftest.Target{Pool: pool, JS: js, Post: func(ctx context.Context, id string, body []byte) (int, error) {
		req, err := standardRequest(ctx, base+"/webhooks/"+selftest.Source, secret, id, time.Now(), body)
		if err != nil {
			return 0, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		return resp.StatusCode, nil
	}}
	if c.Only {
		return c.cleanupOnly(ctx, rt, target)
	}
	report, err := selftest.Run(ctx, target, selftest.RunOptions{RunID: c.RunID, Timeout: c.Timeout})
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			err = fmt.Errorf("%w (is serve running against this NATS?)", err)
		}
		return dbError(err)
	}
	out := selftestOutput{Report: report, URL: base}
	if c.Cleanup {
		p, err := selftest.Cleanup(ctx, target, report.RunID)
		if err != nil {
			return err
		}
		out.Cleaned = &p
		r, err := selftest.RemoveDurable(ctx, js)
		if err != nil {
			return err
		}
		out.Durable = &r
	}
	if c.JSON {
		err = writeJSON(rt.stdout, out)
	} else {
		err = report.WriteText(rt.stdout)
		if err == nil && out.Cleaned != nil {
			_, err = fmt.Fprintf(rt.stdout, "removed run %s: %s\n%s\n", report.RunID, out.Cleaned, out.Durable)
		} else if err == nil {
			_, err = fmt.Fprintf(rt.stdout, "rows kept under run %s; remove them with --cleanup-only --run-id %s\n", report.RunID, report.RunID)
		}
	}
	if err != nil {
		return err
	}
	if !report.OK {
		return fmt.Errorf("selftest: %d of %d checks failed (run %s)", report.Failed(), len(report.Checks), report.RunID)
	}
	return nil
}

func (c *selftestCmd) cleanupOnly(ctx context.Context, rt *runtime, target selftest.Target) error {
	if c.RunID == "" {
		return errors.New("selftest: --cleanup-only needs --run-id")
	}
	p, err := selftest.Cleanup(ctx, target, c.RunID)
	if err != nil {
		return dbError(err)
	}
	r, err := selftest.RemoveDurable(ctx, target.JS)
	if err != nil {
		return err
	}
	if c.JSON {
		return writeJSON(rt.stdout, map[string]any{"run_id": c.RunID, "cleaned": p, "durable": r})
	}
	_, err = fmt.Fprintf(rt.stdout, "removed run %s: %s\n%s\n", c.RunID, p, r)
	return err
}
