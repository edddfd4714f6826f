package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	goruntime "runtime"
	"runtime/debug"
	"strings"
	"time"
)

// versionCmd prints the build's version.
type versionCmd struct {
	JSON bool `help:"Print JSON."`
}

// Set at build time by the image and release builds, which may build
// without a VCS stamp (no .git in the build context):
//
//	go build -ldflags "-X github.com/hookbridge/hookbridge/cli.stampedVersion=v1.2.3 -X github.com/hookbridge/hookbridge/cli.stampedCommit=$(git rev-parse HEAD)"
//
// Empty: the build's own information is used.
var (
	stampedVersion string
	stampedCommit  string
)

// buildVersion is what the binary knows of its build: the version (set
// at build time, else the main module's: a tag, or "(devel)" for a local
// build) and the commit it was built from (set at build time, else the
// VCS stamp), from runtime/debug.ReadBuildInfo.
type buildVersion struct {
	Version  string `json:"version"`
	Commit   string `json:"commit,omitempty"`
	Time     string `json:"commit_time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
}

func readBuildVersion() buildVersion {
	v := buildVersion{Version: "unknown", Go: goruntime.Version()}
	if info, ok := debug.ReadBuildInfo(); ok {
		if info.Main.Version != "" {
			v.Version = info.Main.Version
		}
		v.Go = info.GoVersion
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.time":
				v.Time = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	if stampedVersion != "" {
		v.Version = stampedVersion
	}
	if stampedCommit != "" && stampedCommit != v.Commit {
		v.Commit, v.Time, v.Modified = stampedCommit, "", false
	}
	return v
}

// Run implements the version command.
func (c *versionCmd) Run(rt *runtime) error {
	v := readBuildVersion()
	if c.JSON {
		return writeJSON(rt.stdout, v)
	}
	line := "hookbridge " + v.Version
	switch {
	case v.Commit != "":
		line += " commit " + v.Commit
		if v.Modified {
			line += " (modified)"
		}
	default:
		line += " commit unknown (built without VCS information or a stamped commit)"
	}
	fmt.Fprintln(rt.stdout, line+" "+v.Go)
	return nil
}

// healthcheckCmd asks the local hookbridge whether it is ready.
type healthcheckCmd struct {
	URL     string        `help:"Readiness URL (default: http://<http_addr>/readyz, a 0.0.0.0 or [::] host asked on loopback)."`
	Timeout time.Duration `help:"Give up after this long." default:"3s"`
	httpFlags
}

// Run implements the healthcheck command: exit 0 when /readyz answers 200.
// The distroless image has no shell or curl, so its HEALTHCHECK runs the
// binary itself.
func (c *healthcheckCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	url := c.URL
	if url == "" {
		cfg, err := g.load(rt)
		if err != nil {
			return err
		}
		url = "http://" + loopbackFor(cfg.HTTPAddr) + "/readyz"
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer resp.Body.Close()
	var body struct {
		Checks map[string]string `json:"checks"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&body) // the status decides; the checks only explain
	if resp.StatusCode != http.StatusOK {
		var down []string
		for name, state := range body.Checks {
			if state != "ok" {
				down = append(down, name)
			}
		}
		return fmt.Errorf("healthcheck: %s answered %d (not ready: %s)", url, resp.StatusCode, strings.Join(down, ", "))
	}
	fmt.Fprintln(rt.stdout, "ready")
	return nil
}

// loopbackFor turns a listen address into one to ask from the same host:
// a wildcard host (0.0.0.0, ::, or none) is asked on 127.0.0.1.
func loopbackFor(addr string) string {
	for _, wild := range []string{"0.0.0.0:", "[::]:", ":"} {
		if strings.HasPrefix(addr, wild) {
			return "127.0.0.1:" + strings.TrimPrefix(addr, wild)
		}
	}
	return addr
}
