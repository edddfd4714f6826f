package app

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// Masked is what [EffectiveYAML] prints in place of a secret.
const Masked = "***"

// EffectiveYAML is cfg as YAML, the way `hookbridge config check` prints
// it (given [Config.Resolved]: the file with the environment, the flags
// and the defaults applied), with every secret shown as [Masked]: inline source and self-test
// secrets, the admin token and the passwords of the database, NATS and
// tracing URLs. secret_env, secret_file and admin_token_file stay: they
// name where a secret is, not the secret.
func EffectiveYAML(cfg Config) ([]byte, error) {
	c := cfg
	c.DatabaseURL = maskURL(cfg.DatabaseURL)
	c.NATSURL = maskURL(cfg.NATSURL)
	c.Tracing.OTLPEndpoint = maskURL(cfg.Tracing.OTLPEndpoint)
	if cfg.AdminToken != "" {
		c.AdminToken = Masked
	}
	c.Selftest.Secrets = masked(cfg.Selftest.Secrets)
	c.Sources = make([]SourceConfig, len(cfg.Sources))
	for i, s := range cfg.Sources {
		s.Secrets = masked(s.Secrets)
		c.Sources[i] = s
	}
	var doc yaml.Node
	if err := doc.Encode(c); err != nil {
		return nil, fmt.Errorf("config: print: %w", err)
	}
	dropUnused(&doc, cfg)
	explainZeros(&doc, cfg)
	prune(&doc)
	out, err := yaml.Marshal(&doc)
	if err != nil {
		return nil, fmt.Errorf("config: print: %w", err)
	}
	return out, nil
}

// dropUnused removes the blocks serve does not read in cfg: a source's
// hmac block unless its scheme is hmac, tracing while it is off (no
// endpoint), and embedded_nats with nats_url set. Their zeros would read as settings in use.
func dropUnused(doc *yaml.Node, cfg Config) {
	if cfg.Tracing.OTLPEndpoint == "" {
		removeKey(doc, "tracing")
	}
	if cfg.NATSURL != "" {
		removeKey(doc, "embedded_nats") // an external server has its own
	}
	sources := mapValue(doc, "sources")
	if sources == nil || sources.Kind != yaml.SequenceNode {
		return
	}
	for i, s := range sources.Content {
		if i < len(cfg.Sources) && cfg.Sources[i].Scheme != verify.SchemeHMAC {
			removeKey(s, "hmac")
		}
	}
}

// explainZeros comments the zeros that mean "no limit".
func explainZeros(doc *yaml.Node, cfg Config) {
	if cfg.InboxRetention != nil && *cfg.InboxRetention == 0 {
		if n := mapValue(doc, "inbox_retention"); n != nil {
			n.LineComment = "kept forever"
		}
	}
	if streams := mapValue(doc, "streams"); streams != nil && cfg.Streams.MaxBytes == 0 {
		if n := mapValue(streams, "max_bytes"); n != nil {
			// 0 is not "no limit" for HOOKS: serve bounds it by a share
			// of the JetStream store, known only once it is connected
			// (and logged then as hooks_max_bytes).
			events := "EVENTS: no limit"
			if len(cfg.Delivery.Endpoints) > 0 {
				events = fmt.Sprintf("EVENTS: %.0f%% of it (events_max_bytes)", 100*stream.EventsStoreShare)
			}
			n.LineComment = fmt.Sprintf("HOOKS: %.0f%% of the JetStream store (serve logs hooks_max_bytes at start); %s", 100*stream.HooksStoreShare, events)
		}
	}
	if streams := mapValue(doc, "streams"); streams != nil && cfg.Streams.EventsMaxAge == 0 {
		if n := mapValue(streams, "events_max_age"); n != nil {
			// 0 keeps EVENTS by max_age without endpoints; with them,
			// nothing an endpoint has not received leaves it.
			n.LineComment = "EVENTS: max_age without delivery endpoints; none with them (what an endpoint has not received stays)"
		}
	}
	if sources := mapValue(doc, "sources"); sources != nil {
		for i, s := range sources.Content {
			if i < len(cfg.Sources) && cfg.Sources[i].Tolerance == 0 {
				if n := mapValue(s, "tolerance"); n != nil {
					n.LineComment = "the scheme signs no timestamp"
				}
			}
			if i < len(cfg.Sources) && cfg.Sources[i].OrderingKey != nil && cfg.Sources[i].OrderingKey.None {
				// KeyConfig writes none as an empty mapping; the file
				// spells it "none".
				if n := mapValue(s, "ordering_key"); n != nil {
					*n = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "none"}
				}
			}
		}
	}
}

// mapValue is the value of key in the mapping m, nil when there is none.
func mapValue(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// removeKey removes key and its value from the mapping m.
func removeKey(m *yaml.Node, key string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content = append(m.Content[:i], m.Content[i+2:]...)
			return
		}
	}
}

// masked is secrets with each one replaced by [Masked] (a new slice: the
// caller's configuration is left as it is).
func masked(secrets stringList) stringList {
	if secrets == nil {
		return nil
	}
	out := make(stringList, len(secrets))
	for i := range out {
		out[i] = Masked
	}
	return out
}

// prune drops the keys of n's mappings whose values are null, "", [] or
// {} (after pruning them in turn): what is not set says nothing. Zeros
// stay: in a resolved configuration a 0 is the value in use (no batch
// wait, no tolerance for a scheme that signs no timestamp).
func prune(n *yaml.Node) bool {
	switch n.Kind {
	case yaml.ScalarNode:
		return n.Tag == "!!null" || n.Tag == "!!str" && n.Value == ""
	case yaml.MappingNode:
		kept := n.Content[:0]
		for i := 0; i+1 < len(n.Content); i += 2 {
			if !prune(n.Content[i+1]) {
				kept = append(kept, n.Content[i], n.Content[i+1])
			}
		}
		n.Content = kept
		return len(kept) == 0
	case yaml.SequenceNode:
		for _, c := range n.Content {
			prune(c)
		}
		return len(n.Content) == 0
	case yaml.DocumentNode:
		for _, c := range n.Content {
			prune(c)
		}
	}
	return false
}

// dsnPassword finds the password of a key=value connection string.
var dsnPassword = regexp.MustCompile(`(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// maskURL replaces the password of a URL, or of a key=value connection
// string, with Masked. Anything it cannot parse is masked whole: it may
// be a secret written in a form the masking does not know.
func maskURL(s string) string {
	if s == "" || s == "pgenv:" {
		return s
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" {
		if dsnPassword.MatchString(s) {
			return dsnPassword.ReplaceAllString(s, "${1}"+Masked)
		}
		if err != nil {
			return Masked
		}
		return s
	}
	masked := false
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), Masked)
		masked = true
	}
	q := u.Query()
	if q.Has("password") {
		q.Set("password", Masked)
		u.RawQuery = q.Encode()
		masked = true
	}
	if !masked {
		return s
	}
	// URL encoding escapes '*'; show the mask as it is written elsewhere.
	return strings.ReplaceAll(u.String(), "%2A%2A%2A", Masked)
}
