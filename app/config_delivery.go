package app

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hookbridge/hookbridge/internal/delivery"
)

// DeliveryConfig is the delivery role's section: the HTTP endpoints that
// receive EVENTS (docs/DELIVERY.md).
type DeliveryConfig struct {
	Endpoints []EndpointConfig `yaml:"endpoints"`
}

// EndpointConfig is one endpoint as configured; see [delivery.Endpoint]
// for what each field means. Secrets may be inline, named environment
// variables or files, as a source's are.
type EndpointConfig struct {
	Name         string            `yaml:"name"`
	URL          string            `yaml:"url"`
	Subjects     stringList        `yaml:"subjects"`
	Secrets      stringList        `yaml:"secrets"`
	SecretEnv    stringList        `yaml:"secret_env"`
	SecretFile   stringList        `yaml:"secret_file"`
	Timeout      time.Duration     `yaml:"timeout"`
	Rate         float64           `yaml:"rate"`
	Concurrency  int               `yaml:"concurrency"`
	Retry        []time.Duration   `yaml:"retry"`
	Ordered      bool              `yaml:"ordered"`
	KeyHeader    string            `yaml:"key_header"`
	Headers      map[string]string `yaml:"headers"`
	AllowPrivate bool              `yaml:"allow_private"`
	DisableAfter time.Duration     `yaml:"disable_after"`
}

// resolved returns the configured endpoints with their secrets read and
// defaults applied, each validated; the first problems are joined in the
// error, which names the endpoint and never a secret.
func (d DeliveryConfig) resolved(env Env) ([]delivery.Endpoint, error) {
	if env == nil {
		env = os.LookupEnv
	}
	var errs []error
	seen := map[string]bool{}
	out := make([]delivery.Endpoint, 0, len(d.Endpoints))
	for i, c := range d.Endpoints {
		secrets, err := c.secrets(env)
		if err != nil {
			errs = append(errs, fmt.Errorf("delivery.endpoints[%d]: %w", i, err))
			continue
		}
		e := delivery.Endpoint{Name: c.Name, URL: c.URL, Subjects: c.Subjects, Secrets: secrets,
			Timeout: c.Timeout, Rate: c.Rate, Concurrency: c.Concurrency, Retry: c.Retry, Ordered: c.Ordered,
			KeyHeader: c.KeyHeader, Headers: c.Headers, AllowPrivate: c.AllowPrivate, DisableAfter: c.DisableAfter}.WithDefaults()
		if err := e.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("delivery.endpoints[%d]: %w", i, err))
			continue
		}
		if seen[e.Name] {
			errs = append(errs, fmt.Errorf("delivery.endpoints[%d]: endpoint %s is declared twice", i, e.Name))
			continue
		}
		seen[e.Name] = true
		out = append(out, e)
	}
	return out, errors.Join(errs...)
}

func (c EndpointConfig) secrets(env Env) ([]string, error) {
	out := append([]string(nil), c.Secrets...)
	for _, name := range c.SecretEnv {
		v, ok := env(name)
		if !ok || v == "" {
			return nil, fmt.Errorf("secret_env: environment variable %s is not set", name)
		}
		out = append(out, v)
	}
	for _, path := range c.SecretFile {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("secret_file: cannot read %s: %w", path, errors.Unwrap(err))
		}
		out = append(out, strings.TrimSpace(string(b)))
	}
	return out, nil
}
