package app

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/relay"
	"github.com/hookbridge/hookbridge/internal/stream"
	"github.com/hookbridge/hookbridge/internal/tracing"
)

// DevSecret is the demo source's secret when HOOKBRIDGE_DEMO_SECRET is
// unset. It is public: serve warns loudly when it is in use.
const DevSecret = "whsec_ZGV2LXNlY3JldC1kby1ub3QtdXNlLWluLXByb2R1Y3Rpb24="

// DefaultInboxRetention is how long inbox rows are kept by default. An
// inbox row is what makes a repeat of its event a duplicate once the
// message has left HOOKS (streams.max_age), so it must outlive every
// resend a provider may still make: automatic retries end within 3 days
// at GitHub, Stripe and Shopify, and Stripe resends events by hand up to
// 30 days back. At about 230 bytes per row that is ~20 GB per day per
// 1,000 events/s, ~600 GB in all; kept forever it grew without bound.
const DefaultInboxRetention = 30 * 24 * time.Hour

// InboxRetentionOrDefault is the effective inbox retention (0: keep).
func (c *Config) InboxRetentionOrDefault() time.Duration {
	if c.InboxRetention != nil {
		return *c.InboxRetention
	}
	return max(DefaultInboxRetention, (stream.Options{MaxAge: c.Streams.MaxAge}).HooksMaxAge())
}

// DefaultHTTPAddr is the webhook listener's address when none is set:
// loopback only, so that a first run exposes nothing.
const DefaultHTTPAddr = "127.0.0.1:8080"

// DefaultDataDir is where the embedded JetStream server stores when no
// data directory is set.
const DefaultDataDir = "./data"

// DefaultAdminAddr is the admin listener's address when none is set:
// loopback only, like the webhook address's default.
const DefaultAdminAddr = "127.0.0.1:8081"

// DefaultDatabaseURL is used when no database is configured anywhere.
const DefaultDatabaseURL = "postgres://postgres:postgres@127.0.0.1:5432/postgres?sslmode=disable"

// Config is hookbridge's configuration: the YAML file, with environment
// variables and flags applied on top.
type Config struct {
	HTTPAddr     string `yaml:"http_addr"`
	DatabaseURL  string `yaml:"database_url"`
	NATSURL      string `yaml:"nats_url"`
	DataDir      string `yaml:"data_dir"`
	MaxBodyBytes int64  `yaml:"max_body_bytes"`
	MaxInFlight  int    `yaml:"max_in_flight"`
	// InboxRetention deletes inbox rows older than this; unset:
	// [DefaultInboxRetention] (or streams.max_age when that is longer);
	// 0 ("0s" in YAML) keeps them forever.
	InboxRetention *time.Duration `yaml:"inbox_retention"`
	MetricsAddr    string         `yaml:"metrics_addr"`
	// AdminAddr is the admin API and console's own listener (default
	// 127.0.0.1:8081), never the webhook address. It starts only with a
	// token: AdminToken, or the first line of the file AdminTokenFile.
	AdminAddr      string        `yaml:"admin_addr"`
	AdminToken     string        `yaml:"admin_token"`
	AdminTokenFile string        `yaml:"admin_token_file"`
	LogFormat      string        `yaml:"log_format"` // text or json
	LogLevel       string        `yaml:"log_level"`  // debug, info, warn, error
	Streams        StreamsConfig `yaml:"streams"`
	Sources        []SourceConfig
	Consumers      []ConsumerConfig
	Relay          RelayConfig `yaml:"relay"`
	// Delivery posts EVENTS to HTTP endpoints (docs/DELIVERY.md).
	Delivery DeliveryConfig `yaml:"delivery"`

	// Tracing: OpenTelemetry; metrics_addr above moves /metrics off http_addr.
	Tracing TracingConfig `yaml:"tracing"`

	// Selftest enables the built-in acceptance run (hookbridge selftest).
	Selftest SelftestConfig `yaml:"selftest"`

	// EmbeddedNATS tunes the JetStream server started when nats_url is
	// empty.
	EmbeddedNATS EmbeddedNATSConfig `yaml:"embedded_nats"`

	adminToken string // read by Complete from admin_token or admin_token_file
	// dir is the configuration file's directory, which relative paths in
	// it (sql.migrations) start at; empty when not read from a file.
	dir string
}

// SelftestConfig enables the self-test's dedicated source and consumer
// (package selftest), named hookbridge_selftest. Its handler writes only
// to the hookbridge_selftest schema and to events.hookbridge_selftest.*.
type SelftestConfig struct {
	Enabled bool `yaml:"enabled"`
	// Secrets sign the self-test's deliveries, given as for a source; the
	// selftest command signs with the first.
	Secrets    stringList `yaml:"secrets"`
	SecretEnv  stringList `yaml:"secret_env"`
	SecretFile stringList `yaml:"secret_file"`
}

// AdminTokenValue is the admin token as [Config.Complete] read it (from
// admin_token or admin_token_file); "" leaves the admin listener off.
func (c *Config) AdminTokenValue() string { return c.adminToken }

// TracingConfig configures OpenTelemetry tracing (off when no endpoint).
type TracingConfig struct {
	// OTLPEndpoint is the OTLP/HTTP collector, e.g. http://otel-collector:4318.
	OTLPEndpoint string  `yaml:"otlp_endpoint"`
	ServiceName  string  `yaml:"service_name"`
	SampleRatio  float64 `yaml:"sample_ratio"` // of new traces; 0 = all
}

// StreamsConfig tunes the JetStream streams.
type StreamsConfig struct {
	Replicas        int           `yaml:"replicas"`
	DuplicateWindow time.Duration `yaml:"duplicate_window"`
	// MaxAge is how long HOOKS keeps an applied message (0: 3 days); an
	// unapplied one stays until every consumer has applied it.
	MaxAge time.Duration `yaml:"max_age"`
	// MaxBytes bounds HOOKS (0: half the JetStream store, see
	// stream.Options.HooksMaxBytes) and EVENTS (0: a quarter of the store
	// with delivery endpoints, else unlimited; stream.Options.EventsMaxBytes);
	// -1 leaves both unbounded.
	MaxBytes int64 `yaml:"max_bytes"`
	// EventsMaxAge, when set, is a JetStream max age for EVENTS: events
	// older than it are deleted whether every delivery endpoint received
	// them or not. Unset (0): with delivery endpoints EVENTS has none and
	// keeps what an endpoint has not received (docs/DELIVERY.md); without
	// them it keeps events for max_age.
	EventsMaxAge time.Duration `yaml:"events_max_age"`
	// Partitions spreads the keyed messages (sources with an ordering
	// key) over this many partitions (default stream.DefaultPartitions).
	// It is recorded on HOOKS when the stream is created or first
	// upgraded, and cannot change afterwards (docs/DESIGN.md, "Order").
	Partitions int `yaml:"partitions"`
}

// PartitionsOrDefault is the effective number of partitions.
func (s StreamsConfig) PartitionsOrDefault() int {
	if s.Partitions <= 0 {
		return stream.DefaultPartitions
	}
	return s.Partitions
}

// SourceConfig declares one webhook sender.
type SourceConfig struct {
	Name       string        `yaml:"name"`
	Scheme     string        `yaml:"scheme"`
	Secrets    stringList    `yaml:"secrets"`
	SecretEnv  stringList    `yaml:"secret_env"`
	SecretFile stringList    `yaml:"secret_file"`
	Tolerance  time.Duration `yaml:"tolerance"`
	EventID    *FieldConfig  `yaml:"event_id"`
	EventType  *FieldConfig  `yaml:"event_type"`
	// OrderingKey says where the entity an event is about is named, or
	// "none"; unset: the scheme's default (bridge.DefaultOrderingKey).
	OrderingKey *KeyConfig `yaml:"ordering_key"`
	HMAC        HMACConfig `yaml:"hmac"`
	secretsRead []string
}

// FieldConfig says where an event id or type is found.
type FieldConfig struct {
	Header  string `yaml:"header"`
	Pointer string `yaml:"pointer"`
	Suffix  string `yaml:"suffix"`
}

// KeyConfig says where a source's ordering key is found: a header or a
// JSON pointer, or "none" (the scalar) for a source without one.
type KeyConfig struct {
	Header  string `yaml:"header"`
	Pointer string `yaml:"pointer"`
	// None is set by the scalar "none".
	None bool `yaml:"-"`
}

// UnmarshalYAML accepts "none" or a mapping with header or pointer.
func (k *KeyConfig) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		if n.Value != "none" {
			return fmt.Errorf("line %d: ordering_key: %q: use none, {pointer: /json/pointer} or {header: Name}", n.Line, n.Value)
		}
		*k = KeyConfig{None: true}
		return nil
	}
	type plain KeyConfig
	var v plain
	if err := n.Decode(&v); err != nil {
		return err
	}
	*k = KeyConfig(v)
	return nil
}

// field is the ingress's view of k; nil for none.
func (k *KeyConfig) field() *bridge.Field {
	if k.None {
		return nil
	}
	return &bridge.Field{Header: k.Header, Pointer: k.Pointer}
}

// HMACConfig configures scheme "hmac".
type HMACConfig struct {
	Header          string        `yaml:"header"`
	Prefix          string        `yaml:"prefix"`
	Encoding        string        `yaml:"encoding"`
	Algorithm       string        `yaml:"algorithm"`
	TimestampHeader string        `yaml:"timestamp_header"`
	Tolerance       time.Duration `yaml:"tolerance"`
}

// ConsumerConfig declares one consumer.
type ConsumerConfig struct {
	Name           string          `yaml:"name"`
	Handler        string          `yaml:"handler"`
	Sources        []string        `yaml:"sources"`
	EventTypes     []string        `yaml:"event_types"`
	Concurrency    int             `yaml:"concurrency"`
	BatchSize      int             `yaml:"batch_size"`
	BatchWait      time.Duration   `yaml:"batch_wait"`
	AckWait        time.Duration   `yaml:"ack_wait"`
	MaxDeliver     int             `yaml:"max_deliver"`
	MaxAckPending  int             `yaml:"max_ack_pending"`
	HandlerTimeout time.Duration   `yaml:"handler_timeout"`
	Backoff        []time.Duration `yaml:"backoff"`
	// PostponeLimit bounds how long an event its handler postponed
	// (it needs a later event of its key first) waits before it is
	// dead-lettered (engine.DefaultPostponeLimit).
	PostponeLimit time.Duration `yaml:"postpone_limit"`

	// SQL declares the consumer with SQL statements instead of a Go
	// handler (sqlconsumers.go); a consumer names one or the other.
	SQL *SQLConsumerConfig `yaml:"sql"`
}

// consumerOptions are the engine.Options consumer cc runs with: serve
// passes them to engine.New (adding its logger and tracer), Validate
// reports what the engine refuses in them, config check prints them and
// the operator commands replay with them. The engine's defaults are
// filled in ([engine.Options.WithDefaults]). The error joins why the
// handler cannot be built (Handler is then nil) and what the engine
// refuses ([engine.Options.Validate]).
func (c *Config) consumerOptions(cc *ConsumerConfig, handlers Handlers) (engine.Options, error) {
	h, err := cc.NewHandler(handlers)
	o := engine.Options{Name: cc.Name, Sources: cc.Sources, EventTypes: cc.Types(handlers), Handler: h,
		Partitions: c.ConsumerPartitions(cc), KeyedSources: c.ConsumerKeyedSources(cc)}
	for _, s := range consumerSettings(cc, &o) {
		s.in()
	}
	if o.Concurrency == 0 {
		o.Concurrency = c.Concurrency(cc) // an SQL consumer's differs
	}
	o = o.WithDefaults()
	return o, errors.Join(err, o.Validate())
}

// setting pairs a setting as configured with the option that applies it.
type setting struct{ in, out func() }

// pair is the setting of configured and option: in copies the
// configured value to the option, out the option's back.
func pair[T any](configured, option *T) setting {
	return setting{in: func() { *option = *configured }, out: func() { *configured = *option }}
}

// consumerSettings pairs each setting of cc with its engine option:
// consumerOptions copies them in, [Config.Resolved] copies the values in
// use back out for config check. The engine defines each option's
// default and check; a new setting is a field of ConsumerConfig, its
// engine option and a line here.
func consumerSettings(cc *ConsumerConfig, o *engine.Options) []setting {
	return []setting{
		pair(&cc.Concurrency, &o.Concurrency),
		pair(&cc.BatchSize, &o.BatchSize),
		pair(&cc.BatchWait, &o.BatchWait),
		pair(&cc.AckWait, &o.AckWait),
		pair(&cc.MaxDeliver, &o.MaxDeliver),
		pair(&cc.MaxAckPending, &o.MaxAckPending),
		pair(&cc.HandlerTimeout, &o.HandlerTimeout),
		pair(&cc.Backoff, &o.Backoff),
		pair(&cc.PostponeLimit, &o.PostponeLimit),
	}
}

// RelayConfig tunes the outbox relay.
type RelayConfig struct {
	Disabled     bool          `yaml:"disabled"`
	BatchSize    int           `yaml:"batch_size"`
	PollInterval time.Duration `yaml:"poll_interval"`
	MaxAttempts  int           `yaml:"max_attempts"`
	// Retention is how long published messages are kept: unset, a day
	// ([relay.DefaultRetention]); 0, not at all (deleted as they are
	// published, the EVENTS stream being the record); negative, forever.
	Retention *time.Duration `yaml:"retention"`
}

// RelayRetention is the relay's retention options: how long sent
// messages are kept (0: the relay's default), and whether they are
// deleted as they are published instead.
func (r RelayConfig) RelayRetention() (retention time.Duration, deleteSent bool) {
	if r.Retention == nil {
		return 0, false
	}
	return *r.Retention, *r.Retention == 0
}

// options are the relay.Options the relay role runs with, before the
// relay's defaults (serve adds the stream options, its logger and its
// tracer); Validate reports what the relay refuses in them and config
// check prints them with [relay.Options.WithDefaults].
func (r RelayConfig) options() relay.Options {
	retention, deleteSent := r.RelayRetention()
	return relay.Options{BatchSize: r.BatchSize, PollInterval: r.PollInterval, MaxAttempts: r.MaxAttempts,
		Retention: retention, DeleteSent: deleteSent}
}

// stringList accepts a YAML scalar or a sequence.
type stringList []string

func (s *stringList) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*s = []string{n.Value}
		return nil
	}
	var l []string
	if err := n.Decode(&l); err != nil {
		return err
	}
	*s = l
	return nil
}

// LoadFile reads a YAML configuration file. Unknown keys are errors, so a
// typo fails at start with the key and line instead of being ignored.
func LoadFile(path string) (Config, error) {
	var c Config
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) { // an empty file is fine
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	c.dir = filepath.Dir(path)
	return c, nil
}

// Env is how configuration reads the environment (os.LookupEnv in
// production; a map in tests).
type Env func(key string) (string, bool)

// ApplyEnv overlays HOOKBRIDGE_* variables (and the standard ones
// hookbridge honours) on c. It fills no defaults: [Config.Complete] does.
func (c *Config) ApplyEnv(env Env) {
	set := func(dst *string, keys ...string) {
		for _, k := range keys {
			if v, ok := env(k); ok && v != "" {
				*dst = v
				return
			}
		}
	}
	set(&c.HTTPAddr, "HOOKBRIDGE_HTTP_ADDR")
	set(&c.NATSURL, "HOOKBRIDGE_NATS_URL")
	set(&c.DataDir, "HOOKBRIDGE_DATA_DIR")
	set(&c.LogFormat, "HOOKBRIDGE_LOG_FORMAT")
	set(&c.LogLevel, "HOOKBRIDGE_LOG_LEVEL")
	set(&c.MetricsAddr, "HOOKBRIDGE_METRICS_ADDR")
	set(&c.AdminAddr, "HOOKBRIDGE_ADMIN_ADDR")
	set(&c.AdminToken, "HOOKBRIDGE_ADMIN_TOKEN")
	set(&c.AdminTokenFile, "HOOKBRIDGE_ADMIN_TOKEN_FILE")
	set(&c.Tracing.OTLPEndpoint, "HOOKBRIDGE_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
	set(&c.Tracing.ServiceName, "OTEL_SERVICE_NAME")
	if v, ok := env("HOOKBRIDGE_STREAM_REPLICAS"); ok && v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			n = -1 // refused by Validate, naming the variable
		}
		c.Streams.Replicas = n
	}
	set(&c.DatabaseURL, "HOOKBRIDGE_DATABASE_URL", "DATABASE_URL")
	if c.DatabaseURL == "" {
		// pgx builds a connection from the standard PG* variables when
		// given an empty string, so honour them if any is set.
		for _, k := range []string{"PGHOST", "PGPORT", "PGDATABASE", "PGUSER", "PGPASSWORD", "PGSERVICE"} {
			if v, ok := env(k); ok && v != "" {
				c.DatabaseURL = "pgenv:"
				break
			}
		}
	}
}

// withDefaults is c with the top-level settings it leaves empty given
// their defaults. The settings of the parts (streams, consumers, relay,
// ingress limits) stay as configured: each part fills its own, and
// [Config.Resolved] asks it for config check.
func (c Config) withDefaults() Config {
	if c.DatabaseURL == "" {
		c.DatabaseURL = DefaultDatabaseURL
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = DefaultHTTPAddr
	}
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir
	}
	if c.AdminAddr == "" {
		c.AdminAddr = DefaultAdminAddr
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = bridge.DefaultMaxBodyBytes
	}
	if c.LogFormat == "" {
		c.LogFormat = "text"
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	return c
}

// Complete fills the defaults c leaves unset, reads its secrets (the
// admin token and each source's, from the environment and files) and
// validates it against handlers ([Config.Validate]): what [Load] does
// once the file, the environment and the flags are applied. A Config
// built in code goes through it before [NewServer]. Every error names
// its key.
func (c *Config) Complete(env Env, handlers Handlers) error {
	*c = c.withDefaults()
	return errors.Join(c.readSecrets(env), c.Validate(env, handlers))
}

// NATSMaxPayload is the max_payload a NATS server needs for the largest
// body the ingress accepts (max_body_bytes with the message's headers);
// the embedded server is started with it.
func (c *Config) NATSMaxPayload() int64 { return bridge.RequiredMaxPayload(c.MaxBodyBytes) }

// PoolURL is the connection string for pgxpool ("" = PG* variables).
func (c *Config) PoolURL() string {
	if c.DatabaseURL == "pgenv:" {
		return ""
	}
	return c.DatabaseURL
}

// UsesDevSecret reports whether the demo source runs on [DevSecret].
func (c *Config) UsesDevSecret() bool {
	for _, s := range c.Sources {
		for _, v := range s.secretsRead {
			if v == DevSecret {
				return true
			}
		}
	}
	return false
}

// DefaultSources is the configuration used when the file declares no
// sources: one Standard Webhooks source "demo".
func DefaultSources(env Env) []SourceConfig {
	secret := DevSecret
	if v, ok := env("HOOKBRIDGE_DEMO_SECRET"); ok && v != "" {
		secret = v
	}
	// Demo events are about orders: created, paid and cancelled of one
	// order apply in that order (docs/DESIGN.md, "Order").
	return []SourceConfig{{Name: "demo", Scheme: verify.SchemeStandardWebhooks, Secrets: stringList{secret},
		OrderingKey: &KeyConfig{Pointer: "/data/order_id"}}}
}

// DefaultConsumers enables the example orders consumer for "demo".
func DefaultConsumers() []ConsumerConfig {
	return []ConsumerConfig{{Name: "orders", Handler: "orders", Sources: []string{"demo"}}}
}

// Overrides are settings given on a command line: each one that is not
// empty wins over the file and the environment.
type Overrides struct {
	HTTPAddr, DatabaseURL, NATSURL, DataDir string
}

// Load builds the effective configuration: the YAML file at path (none
// when path is empty), then the environment, then o, then the defaults of
// a file without sources (the demo source and, when handlers has one named
// "orders" and the file declares no consumers, the example orders
// consumer), then the self-test's source and consumer when it is enabled
// ([Config.AddSelftest]). A program registering only handlers of its own
// therefore starts with no consumer instead of failing on a handler it
// does not have. The result is completed ([Config.Complete]) against
// handlers (and the self-test's handler, see [WithSelftest]).
func Load(path string, env Env, o Overrides, handlers Handlers) (Config, error) {
	var cfg Config
	if path != "" {
		var err error
		if cfg, err = LoadFile(path); err != nil {
			return cfg, err
		}
	}
	cfg.ApplyEnv(env)
	for dst, v := range map[*string]string{&cfg.HTTPAddr: o.HTTPAddr, &cfg.DatabaseURL: o.DatabaseURL, &cfg.NATSURL: o.NATSURL, &cfg.DataDir: o.DataDir} {
		if v != "" {
			*dst = v
		}
	}
	if len(cfg.Sources) == 0 {
		cfg.Sources = DefaultSources(env)
		if _, ok := handlers["orders"]; ok && len(cfg.Consumers) == 0 {
			cfg.Consumers = DefaultConsumers()
		}
	}
	cfg.AddSelftest()
	if err := cfg.Complete(env, WithSelftest(cfg, handlers)); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// Source is the configured source called name, nil when there is none.
func (c *Config) Source(name string) *SourceConfig {
	for i := range c.Sources {
		if c.Sources[i].Name == name {
			return &c.Sources[i]
		}
	}
	return nil
}

// ResolvedSecrets are the source's secrets as [Config.Complete] read them
// (inline, from the environment and from files), the first one signing.
func (s *SourceConfig) ResolvedSecrets() []string { return s.secretsRead }

// Consumer is the configured consumer called name, nil when there is none.
func (c *Config) Consumer(name string) *ConsumerConfig {
	for i := range c.Consumers {
		if c.Consumers[i].Name == name {
			return &c.Consumers[i]
		}
	}
	return nil
}

// Types are the event types the consumer receives: its event_types, or
// when it lists none every type its handler knows (for an SQL consumer,
// the types its apply names).
func (cc *ConsumerConfig) Types(handlers Handlers) []string {
	if len(cc.EventTypes) > 0 {
		return cc.EventTypes
	}
	if cc.SQL != nil {
		return cc.SQL.sqlTypes()
	}
	return handlers[cc.Handler].EventTypes
}

// complain records a configuration error naming the offending key.
type complain func(key, format string, args ...any)

// collect is a complain that appends to errs.
func collect(errs *[]error) complain {
	return func(key, format string, args ...any) {
		*errs = append(*errs, fmt.Errorf("config: %s: %s", key, fmt.Sprintf(format, args...)))
	}
}

// readSecrets reads the admin token and each source's secrets, which
// Validate checks and the ingress verifies with.
func (c *Config) readSecrets(env Env) error {
	var errs []error
	bad := collect(&errs)
	c.resolveAdminToken(bad)
	for i := range c.Sources {
		c.Sources[i].resolveSecrets(c.sourceKey(i), env, bad)
	}
	return errors.Join(errs...)
}

// sourceKey is how errors name the i-th source.
func (c *Config) sourceKey(i int) string {
	if c.Selftest.Enabled && c.Sources[i].Name == selftestSource {
		return "selftest" // added by AddSelftest from the selftest block
	}
	return fmt.Sprintf("sources[%d]", i)
}

// Validate checks a configuration [Config.Complete] filled and read the
// secrets of, naming the offending key in every error, and changes
// nothing. The checks run in the order of the keys; a consumer's
// settings are checked by the engine that runs them
// ([Config.consumerOptions]), the relay's by the relay.
func (c *Config) Validate(env Env, handlers Handlers) error {
	var errs []error
	bad := collect(&errs)
	c.validateLimits(bad)
	c.validateAdmin(bad)
	c.validateStreams(bad)
	c.validateTelemetry(bad)
	sources := c.validateSources(bad)
	c.validateConsumers(handlers, sources, bad)
	reportOptions(c.Relay.options().WithDefaults().Validate(), "relay", RelayConfig{}, bad, nil)
	// Endpoints are checked here too, so that config check and a start
	// with a wrong endpoint fail before any role runs, naming it.
	if _, err := c.Delivery.resolved(env); err != nil {
		errs = append(errs, fmt.Errorf("config: %w", err))
	}
	return errors.Join(errs...)
}

// validateLimits checks the body limit and the inbox's retention.
func (c *Config) validateLimits(bad complain) {
	if c.MaxBodyBytes < 0 {
		bad("max_body_bytes", "must be positive")
	}
	retention := c.InboxRetentionOrDefault()
	if retention < 0 {
		bad("inbox_retention", "must not be negative (0 keeps inbox rows)")
	}
	if maxAge := (stream.Options{MaxAge: c.Streams.MaxAge}).HooksMaxAge(); retention > 0 && retention < maxAge {
		// A message still in HOOKS can be redelivered or replayed; without
		// its inbox row it would be applied a second time.
		bad("inbox_retention", "%s is shorter than streams.max_age (%s): replays could apply an event twice", retention, maxAge)
	}
}

// resolveAdminToken sets the admin token from admin_token, or else from
// the first line of admin_token_file.
func (c *Config) resolveAdminToken(bad complain) {
	if c.AdminToken != "" || c.AdminTokenFile == "" {
		c.adminToken = strings.TrimSpace(c.AdminToken)
		return
	}
	b, err := os.ReadFile(c.AdminTokenFile)
	if err != nil {
		bad("admin_token_file", "cannot read %s: %v", c.AdminTokenFile, errors.Unwrap(err))
		return
	}
	first, _, _ := strings.Cut(string(b), "\n") // the token is the file's first line
	if c.adminToken = strings.TrimSpace(first); c.adminToken == "" {
		bad("admin_token_file", "%s is empty", c.AdminTokenFile)
	}
}

// validateAdmin checks the resolved admin token and its listener.
func (c *Config) validateAdmin(bad complain) {
	if c.adminToken != "" && !strings.HasSuffix(c.AdminAddr, ":0") && (c.AdminAddr == c.HTTPAddr || c.AdminAddr == c.MetricsAddr) {
		bad("admin_addr", "%s is also the webhook or metrics address; the admin API needs a listener of its own", c.AdminAddr)
	}
	if c.adminToken != "" && len(c.adminToken) < 16 {
		bad("admin_token", "must be at least 16 characters (try: openssl rand -hex 32)")
	}
}

// validateStreams checks the streams block.
func (c *Config) validateStreams(bad complain) {
	if c.Streams.Partitions < 0 || c.Streams.Partitions > stream.MaxPartitions {
		bad("streams.partitions", "must be between 1 and %d", stream.MaxPartitions)
	}
	if c.Streams.EventsMaxAge < 0 {
		bad("streams.events_max_age", "must not be negative (0: none with delivery endpoints, max_age without)")
	}
	if c.Streams.Replicas < 0 || c.Streams.Replicas > 5 {
		bad("streams.replicas", "must be between 1 and 5 (HOOKBRIDGE_STREAM_REPLICAS overrides it)")
	}
}

// validateTelemetry checks the tracing block and the log settings.
func (c *Config) validateTelemetry(bad complain) {
	if c.Tracing.OTLPEndpoint != "" {
		if _, err := tracing.TracesURL(c.Tracing.OTLPEndpoint); err != nil {
			bad("tracing.otlp_endpoint", "%v", err)
		}
	}
	if c.Tracing.SampleRatio < 0 || c.Tracing.SampleRatio > 1 {
		bad("tracing.sample_ratio", "must be between 0 and 1")
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		bad("log_format", "%q is not text or json", c.LogFormat)
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		bad("log_level", "%v", err)
	}
}

// validateSources checks each source; it returns the names declared,
// which consumers may refer to.
func (c *Config) validateSources(bad complain) map[string]bool {
	seen := map[string]bool{}
	for i := range c.Sources {
		s := &c.Sources[i]
		key := c.sourceKey(i)
		if !stream.ValidName(s.Name) {
			bad(key+".name", "%q must be letters, digits, '-' or '_'", s.Name)
		}
		if seen[s.Name] {
			bad(key+".name", "%q declared twice", s.Name)
		}
		seen[s.Name] = true
		if len(s.secretsRead) == 0 {
			bad(key+".secrets", "no secret (set secrets, secret_env or secret_file)")
			continue // without a secret there is no verifier to check
		}
		s.validateIngress(key, bad)
	}
	return seen
}

// resolveSecrets sets the source's secrets: the inline ones, then those
// of its environment variables, then those of its files.
func (s *SourceConfig) resolveSecrets(key string, env Env, bad complain) {
	s.secretsRead = append([]string(nil), s.Secrets...)
	for _, name := range s.SecretEnv {
		v, ok := env(name)
		if !ok || v == "" {
			bad(key+".secret_env", "environment variable %s is not set", name)
			continue
		}
		s.secretsRead = append(s.secretsRead, v)
	}
	for _, path := range s.SecretFile {
		b, err := os.ReadFile(path)
		if err != nil {
			bad(key+".secret_file", "cannot read %s: %v", path, errors.Unwrap(err))
			continue
		}
		s.secretsRead = append(s.secretsRead, strings.TrimSpace(string(b)))
	}
}

// validateIngress checks what the ingress builds from the source: its
// verifier and the fields it reads from deliveries.
func (s *SourceConfig) validateIngress(key string, bad complain) {
	if _, err := s.verifier(); err != nil {
		bad(key+".scheme", "%v", err)
	}
	for name, f := range map[string]*FieldConfig{"event_id": s.EventID, "event_type": s.EventType} {
		if f != nil {
			if err := f.field().Validate(); err != nil {
				bad(key+"."+name, "%v", err)
			}
		}
	}
	if f := s.orderingKey(); f != nil {
		if err := f.Validate(); err != nil {
			bad(key+".ordering_key", "%v", err)
		}
	}
}

// validateConsumers checks each consumer against the handlers and the
// declared sources.
func (c *Config) validateConsumers(handlers Handlers, sources map[string]bool, bad complain) {
	names := map[string]bool{}
	for i := range c.Consumers {
		cc := &c.Consumers[i]
		key := fmt.Sprintf("consumers[%d]", i)
		if names[cc.Name] {
			bad(key+".name", "%q declared twice", cc.Name)
		}
		names[cc.Name] = true
		c.validateConsumer(key, cc, handlers, sources, bad)
	}
}

// validateConsumer checks what a consumer applies and what it receives;
// its name, event types and settings are checked by the engine, as when
// serve starts it.
func (c *Config) validateConsumer(key string, cc *ConsumerConfig, handlers Handlers, sources map[string]bool, bad complain) {
	switch _, ok := handlers[cc.Handler]; {
	case cc.SQL != nil && cc.Handler != "":
		bad(key, "names both handler and sql: a consumer is a Go handler or SQL statements, not both")
	case cc.SQL != nil:
		c.validateSQL(key, cc, handlers, bad)
	case !ok:
		bad(key+".handler", "%q is not a registered handler (have: %s)", cc.Handler, strings.Join(handlers.Names(), ", "))
	}
	for _, src := range cc.Sources {
		if !sources[src] {
			bad(key+".sources", "%q is not a declared source", src)
		}
	}
	o, err := c.consumerOptions(cc, handlers)
	reportOptions(err, key, ConsumerConfig{}, bad, func(option string) bool {
		// Said above when the handler cannot be built: why, and so why
		// it knows no event types.
		return o.Handler == nil && (option == "Handler" || option == "EventTypes" && len(cc.EventTypes) == 0)
	})
}

// reportOptions reports the options the engine or the relay refuses in
// err, each under its YAML key below key: the yaml name of the field of
// that name in settings' type (ConsumerConfig, RelayConfig), else key
// itself. It leaves out those skip names (nil: none) and every other
// error, which the checks before it report.
func reportOptions(err error, key string, settings any, bad complain, skip func(option string) bool) {
	for _, e := range unjoin(err) {
		var option, reason string
		var eo *engine.OptionError
		var ro *relay.OptionError
		switch {
		case errors.As(e, &eo):
			option, reason = eo.Option, eo.Reason
		case errors.As(e, &ro):
			option, reason = ro.Option, ro.Reason
		default:
			continue
		}
		if skip != nil && skip(option) {
			continue
		}
		k := key
		if f, ok := reflect.TypeOf(settings).FieldByName(option); ok {
			if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name != "" && name != "-" {
				k += "." + name
			}
		}
		bad(k, "%s", reason)
	}
}

// unjoin is the errors joined in err (errors.Join), flattened.
func unjoin(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		if err == nil {
			return nil
		}
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, unjoin(e)...)
	}
	return out
}

func (f *FieldConfig) field() bridge.Field {
	return bridge.Field{Header: f.Header, Pointer: f.Pointer, Suffix: f.Suffix}
}

func (s *SourceConfig) verifier() (verify.Verifier, error) {
	return verify.New(s.Scheme, s.secretsRead, verify.Options{Tolerance: s.Tolerance, HMAC: verify.HMACConfig(s.HMAC)})
}

// bridgeSource builds the ingress view of a validated source.
func (s *SourceConfig) bridgeSource() (bridge.Source, error) {
	v, err := s.verifier()
	if err != nil {
		return bridge.Source{}, fmt.Errorf("source %s: %w", s.Name, err)
	}
	id, typ := bridge.DefaultFields(s.Scheme)
	if s.EventID != nil {
		id = s.EventID.field()
	}
	if s.EventType != nil {
		typ = s.EventType.field()
	}
	return bridge.Source{Name: s.Name, Verifier: v, EventID: id, EventType: typ, OrderingKey: s.orderingKey()}, nil
}

// orderingKey is where the source's ordering key is found: as configured,
// else the scheme's default; nil when it has none.
func (s *SourceConfig) orderingKey() *bridge.Field {
	if s.OrderingKey != nil {
		return s.OrderingKey.field()
	}
	return bridge.DefaultOrderingKey(s.Scheme)
}

// Keyed reports whether the source has an ordering key.
func (s *SourceConfig) Keyed() bool { return s.orderingKey() != nil }

// KeyedSources are the names of the sources with an ordering key.
func (c *Config) KeyedSources() []string {
	var out []string
	for i := range c.Sources {
		if c.Sources[i].Keyed() {
			out = append(out, c.Sources[i].Name)
		}
	}
	return out
}

// ConsumerPartitions is the number of partitions consumer cc reads
// keyed messages from: the configured partitions when one of its
// sources (all sources, when it names none) has an ordering key, else 0.
func (c *Config) ConsumerPartitions(cc *ConsumerConfig) int {
	for _, name := range c.KeyedSources() {
		if len(cc.Sources) == 0 || slices.Contains(cc.Sources, name) {
			return c.Streams.PartitionsOrDefault()
		}
	}
	return 0
}

// ConsumerKeyedSources are the sources cc reads that have an ordering key.
func (c *Config) ConsumerKeyedSources(cc *ConsumerConfig) []string {
	out := []string{}
	for _, name := range c.KeyedSources() {
		if len(cc.Sources) == 0 || slices.Contains(cc.Sources, name) {
			out = append(out, name)
		}
	}
	return out
}

// keyedOnly reports whether every source cc reads has an ordering key.
func (c *Config) keyedOnly(cc *ConsumerConfig) bool {
	names := cc.Sources
	if len(names) == 0 {
		for i := range c.Sources {
			names = append(names, c.Sources[i].Name)
		}
	}
	for _, n := range names {
		if src := c.Source(n); src == nil || !src.Keyed() {
			return false
		}
	}
	return len(names) > 0
}
