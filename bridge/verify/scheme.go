package verify

import (
	"fmt"
	"strings"
	"time"
)

// Scheme names accepted by [New], as written in configuration.
const (
	SchemeStandardWebhooks = "standard-webhooks"
	SchemeGitHub           = "github"
	SchemeStripe           = "stripe"
	SchemeShopify          = "shopify"
	SchemeSlack            = "slack"
	SchemeHMAC             = "hmac"
)

// Schemes lists the scheme names [New] accepts, in a fixed order. It
// returns a new slice each time, so callers may modify it.
func Schemes() []string {
	return []string{
		SchemeStandardWebhooks,
		SchemeGitHub,
		SchemeStripe,
		SchemeShopify,
		SchemeSlack,
		SchemeHMAC,
	}
}

// Options tunes the verifier [New] builds.
type Options struct {
	// Tolerance bounds |now - signed timestamp| for the schemes that sign
	// one (standard-webhooks, stripe, slack, and hmac with a
	// TimestampHeader). Zero means [DefaultTolerance]. github and shopify
	// sign no timestamp and ignore it.
	Tolerance time.Duration
	// HMAC configures scheme "hmac" and must be left zero for the others.
	// HMAC.Tolerance, when set, wins over Tolerance.
	HMAC HMACConfig
}

// New builds the verifier for scheme with secrets as the active secrets
// (several allow rotation: a signature by any of them passes). It is the
// entry point for configuration; errors name the scheme or field at fault
// and never include a secret.
func New(scheme string, secrets []string, opts Options) (Verifier, error) {
	if opts.Tolerance < 0 {
		return nil, fmt.Errorf("verify: Tolerance %v is negative", opts.Tolerance)
	}
	if scheme != SchemeHMAC && !opts.HMAC.isZero() {
		return nil, fmt.Errorf("verify: HMAC options given for scheme %q; they apply to %q only", scheme, SchemeHMAC)
	}
	switch scheme {
	case SchemeStandardWebhooks:
		return built(NewStandardWebhooks(secrets, opts.Tolerance))
	case SchemeGitHub:
		return built(NewGitHub(secrets))
	case SchemeStripe:
		return built(NewStripe(secrets, opts.Tolerance))
	case SchemeShopify:
		return built(NewShopify(secrets))
	case SchemeSlack:
		return built(NewSlack(secrets, opts.Tolerance))
	case SchemeHMAC:
		cfg := opts.HMAC
		// A general Tolerance only reaches a config that signs a
		// timestamp, like github ignoring it; an explicit HMAC.Tolerance
		// without a timestamp header is still refused by NewHMAC.
		if cfg.Tolerance == 0 && cfg.TimestampHeader != "" {
			cfg.Tolerance = opts.Tolerance
		}
		return built(NewHMAC(secrets, cfg))
	default:
		return nil, fmt.Errorf("verify: unknown scheme %q (known: %s)", scheme, strings.Join(Schemes(), ", "))
	}
}

// built converts a constructor's result to (Verifier, error) without the
// typed-nil trap: a nil *GitHub stored in a Verifier is not == nil.
func built[V Verifier](v V, err error) (Verifier, error) {
	if err != nil {
		return nil, err
	}
	return v, nil
}
