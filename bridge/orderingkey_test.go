package bridge_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// A source with an ordering key publishes each delivery to its key's
// partition, with the key in a header: from the body (a JSON pointer) or
// from a header. A delivery that names no key is accepted and published
// unkeyed. A key too long (or not header-safe) travels as its hash.
func TestOrderingKeyPublishesToTheKeysPartition(t *testing.T) {
	t.Parallel()
	sc := schemeNamed(t, verify.SchemeHMAC)
	byBody := sc.source(t)
	byBody.Name = "bybody"
	byBody.OrderingKey = &bridge.Field{Pointer: "/data/account"}
	byHeader := sc.source(t)
	byHeader.Name = "byheader"
	byHeader.OrderingKey = &bridge.Field{Header: "X-Account"}
	in := newIngress(t, bridge.Options{Partitions: 16}, byBody, byHeader)
	long := strings.Repeat("é", 150)
	for _, c := range []struct {
		source, id, body string
		header           http.Header
		wantKey          string // "" = unkeyed
	}{
		{"bybody", "e1", `{"id":"e1","type":"account.updated","data":{"account":"acct_1"}}`, nil, "acct_1"},
		{"bybody", "e2", `{"id":"e2","type":"account.updated","data":{}}`, nil, ""},
		{"bybody", "e3", `{"id":"e3","type":"account.updated","data":{"account":"` + long + `"}}`, nil, stream.OrderingKeyHeader(long)},
		{"byheader", "e4", `{"id":"e4","type":"account.updated"}`, hdr("X-Account", "acct_2"), "acct_2"},
	} {
		h := http.Header{}
		for k, v := range c.header {
			h[k] = v
		}
		body := []byte(c.body)
		sc.sign(t, sc.secrets[0], time.Now(), h, body)
		a := in.post(t, c.source, h, body)
		if a.code != http.StatusAccepted {
			t.Fatalf("%s: %d %s", c.id, a.code, a.raw)
		}
		m := in.msg(t, a.body.Seq)
		got := m.Header.Get(stream.HeaderOrderingKey)
		src, _, p, ok := stream.SplitHookSubject(m.Subject)
		if !ok || src != c.source || got != c.wantKey {
			t.Fatalf("%s: subject %s, key %q; want source %s, key %q", c.id, m.Subject, got, c.source, c.wantKey)
		}
		wantP := -1
		if c.wantKey != "" {
			wantP = stream.Partition(c.wantKey, 16)
		}
		if p != wantP {
			t.Fatalf("%s: partition %d, want %d (subject %s)", c.id, p, wantP, m.Subject)
		}
	}
	if k := stream.OrderingKeyHeader(long); !strings.HasPrefix(k, stream.HashedKeyPrefix) || len(k) != len(stream.HashedKeyPrefix)+64 {
		t.Fatalf("a long key travels as %q, want its hash", k)
	}
}

// Every partition a key can hash to is a valid subject token, and the
// hash is stable: the ingress of every instance, and nats-server's own
// partition() transform, put a key in the same partition.
func TestPartitionIsStable(t *testing.T) {
	t.Parallel()
	// FNV-1a 32 of "acct_1" is 0xa15253ba; mod 16 = 10.
	if p := stream.Partition("acct_1", 16); p != 10 {
		t.Fatalf("Partition(acct_1, 16) = %d, want 10", p)
	}
	for _, n := range []int{1, 7, 16, stream.MaxPartitions} {
		for _, k := range []string{"", "a", "acct_1", strings.Repeat("x", 300)} {
			if p := stream.Partition(k, n); p < 0 || p >= n {
				t.Fatalf("Partition(%q, %d) = %d", k, n, p)
			}
		}
	}
}
