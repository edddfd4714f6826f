package bridge_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// TestSchemeSignedDeliveryIsPublished sends, for every scheme, one
// delivery signed with each of the two active secrets (a rotation in
// progress): both are accepted and stored under hooks.<source>.<type> with
// the hookbridge headers and the exact body.
func TestSchemeSignedDeliveryIsPublished(t *testing.T) {
	t.Parallel()
	for _, sc := range schemes {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			in := newIngress(t, bridge.Options{}, sc.source(t))
			for i, secret := range sc.secrets {
				id := "evt-" + string(rune('a'+i))
				h, body, typ := sc.sample(id)
				sc.sign(t, secret, in.clock.Now(), h, body)
				a := in.post(t, sc.name, h, body)
				wantCode(t, a, http.StatusAccepted)
				if a.body.Status != "accepted" || a.body.EventID != id || a.body.Seq == 0 {
					t.Fatalf("secret #%d: answer %s, want accepted %s with a sequence", i+1, a.raw, id)
				}
				wantMsgs(t, in, uint64(i+1))

				m := in.msg(t, a.body.Seq)
				if want := "hooks." + sc.name + "." + stream.TypeSubject(typ); m.Subject != want {
					t.Errorf("subject %q, want %q", m.Subject, want)
				}
				if !bytes.Equal(m.Data, body) {
					t.Errorf("stored body %q, want %q", m.Data, body)
				}
				sum := sha256.Sum256(body)
				for k, want := range map[string]string{
					stream.HeaderSource:     sc.name,
					stream.HeaderEventID:    id,
					stream.HeaderEventType:  typ,
					stream.HeaderBodySHA256: hex.EncodeToString(sum[:]),
					stream.HeaderMsgID:      sc.name + ":" + id,
				} {
					if got := m.Header.Get(k); got != want {
						t.Errorf("header %s = %q, want %q", k, got, want)
					}
				}
				if got, err := time.Parse(time.RFC3339Nano, m.Header.Get(stream.HeaderReceivedAt)); err != nil || !got.Equal(in.clock.Now()) {
					t.Errorf("header %s = %q, want the handler's clock %v", stream.HeaderReceivedAt, m.Header.Get(stream.HeaderReceivedAt), in.clock.Now())
				}
			}
		})
	}
}

// TestSchemeBadSignatureIsRefused sends, for every scheme, deliveries that
// must not be trusted: signed with a secret that is not configured, with
// the body changed after signing, with the signature removed, and signed
// by nobody. Each is 401 and nothing reaches HOOKS; the same delivery
// signed properly is then accepted, so the refusals were the signature's.
func TestSchemeBadSignatureIsRefused(t *testing.T) {
	t.Parallel()
	for _, sc := range schemes {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			in := newIngress(t, bridge.Options{}, sc.source(t))
			now := in.clock.Now()
			cases := map[string]func() (http.Header, []byte){
				"unknown secret": func() (http.Header, []byte) {
					h, body, _ := sc.sample("evt-1")
					sc.sign(t, sc.stranger, now, h, body)
					return h, body
				},
				"tampered body": func() (http.Header, []byte) {
					h, body, _ := sc.sample("evt-1")
					sc.sign(t, sc.secrets[1], now, h, body)
					return h, bytes.Replace(body, []byte(`"`), []byte(` "`), 1)
				},
				"no signature": func() (http.Header, []byte) {
					h, body, _ := sc.sample("evt-1")
					return h, body
				},
				"signature of another body": func() (http.Header, []byte) {
					h, body, _ := sc.sample("evt-1")
					sc.sign(t, sc.secrets[1], now, h, []byte(`{}`))
					return h, body
				},
			}
			for name, mk := range cases {
				h, body := mk()
				a := in.post(t, sc.name, h, body)
				if a.code != http.StatusUnauthorized || a.body.Status != "error" || !strings.HasPrefix(a.body.Error, "signature: ") {
					t.Errorf("%s: answer %d %s, want 401 with a signature error", name, a.code, a.raw)
				}
			}
			wantMsgs(t, in, 0)

			h, body, _ := sc.sample("evt-1")
			sc.sign(t, sc.secrets[1], now, h, body)
			wantCode(t, in.post(t, sc.name, h, body), http.StatusAccepted)
			wantMsgs(t, in, 1)
		})
	}
}

// TestSecretRotationRetiresOldSecret finishes a rotation: with only the
// new secret configured, a delivery signed with the old one is refused
// and one signed with the new one passes. (Both passing while both are
// configured is TestSchemeSignedDeliveryIsPublished.)
func TestSecretRotationRetiresOldSecret(t *testing.T) {
	t.Parallel()
	for _, sc := range schemes {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			onlyNew := sc
			onlyNew.secrets = sc.secrets[1:]
			in := newIngress(t, bridge.Options{}, onlyNew.source(t))
			now := in.clock.Now()

			h, body, _ := sc.sample("evt-old")
			sc.sign(t, sc.secrets[0], now, h, body)
			wantCode(t, in.post(t, sc.name, h, body), http.StatusUnauthorized)
			h, body, _ = sc.sample("evt-new")
			sc.sign(t, sc.secrets[1], now, h, body)
			wantCode(t, in.post(t, sc.name, h, body), http.StatusAccepted)
			wantMsgs(t, in, 1)
		})
	}
}

// TestSchemesShareOneHandler mounts two sources on one handler: a
// delivery signed for one is refused by the other and by an unknown
// source name, and accepted only at its own.
func TestSchemesShareOneHandler(t *testing.T) {
	t.Parallel()
	gh := schemeNamed(t, verify.SchemeGitHub)
	in := newIngress(t, bridge.Options{}, gh.source(t), schemeNamed(t, verify.SchemeStripe).source(t))
	h, body, _ := gh.sample("evt-1")
	gh.sign(t, gh.secrets[0], in.clock.Now(), h, body)
	wantCode(t, in.post(t, verify.SchemeStripe, h, body), http.StatusUnauthorized)
	wantCode(t, in.post(t, "nope", h, body), http.StatusNotFound)
	wantMsgs(t, in, 0)
	wantCode(t, in.post(t, verify.SchemeGitHub, h, body), http.StatusAccepted)
	wantMsgs(t, in, 1)
}

// TestSchemeTableCoversEveryScheme: the end-to-end tables of this package
// run every registered scheme (a new scheme's file comes with its sample
// here), and what each sample says of its timestamp is what the scheme's
// descriptor says.
func TestSchemeTableCoversEveryScheme(t *testing.T) {
	t.Parallel()
	var names []string
	for _, sc := range schemes {
		names = append(names, sc.name)
		s, ok := verify.LookupScheme(sc.name)
		if !ok {
			t.Errorf("%s: no such scheme", sc.name)
			continue
		}
		var cfg verify.HMACConfig
		if sc.name == verify.SchemeHMAC {
			cfg = hmacConfig
		}
		if signs := s.Tolerance(cfg) > 0; signs != sc.timestamped {
			t.Errorf("%s: the descriptor's Tolerance %v, the sample says timestamped = %v", sc.name, s.Tolerance(cfg), sc.timestamped)
		}
	}
	if want := verify.Schemes(); !slices.Equal(names, want) {
		t.Errorf("samples for %v, schemes registered %v", names, want)
	}
}
