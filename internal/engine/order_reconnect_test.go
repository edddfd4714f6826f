package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// cutProxy forwards TCP to a NATS server; cut drops the bytes in flight
// from the server and closes every connection, as a network failure does.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	pairs  []*proxyPair
}

type proxyPair struct {
	client, server net.Conn
	cut            atomic.Bool
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			pp := &proxyPair{client: c, server: s}
			p.mu.Lock()
			p.pairs = append(p.pairs, pp)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c); s.Close() }()
			go func() {
				buf := make([]byte, 32<<10)
				for {
					n, err := s.Read(buf)
					if pp.cut.Load() {
						break // what the server sent is lost
					}
					if n > 0 {
						if _, werr := c.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				c.Close()
				s.Close()
			}()
		}
	}()
	return p
}

func (p *cutProxy) url() string { return "nats://" + p.ln.Addr().String() }

// cut marks every connection cut; each drops the next bytes from the
// server and closes.
func (p *cutProxy) cut() {
	p.mu.Lock()
	pairs := p.pairs
	p.pairs = nil
	p.mu.Unlock()
	for _, pp := range pairs {
		pp.cut.Store(true)
	}
	time.AfterFunc(200*time.Millisecond, func() {
		for _, pp := range pairs {
			pp.client.Close()
			pp.server.Close()
		}
	})
}

// One member, steady traffic on a few keys, and short network failures
// between the member and NATS (it reconnects within a second, so it keeps
// its pins). Nothing fails and nobody joins or leaves: every key must
// still apply in order.

func TestKeyedReconnectKeepsOrder(t *testing.T) {
	t.Parallel()
	const keys = 8
	db := hookbridgetest.Postgres(t, orderSchema)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	proxy := newCutProxy(t, strings.TrimPrefix(ns.URL(), "nats://"))
	var reconnects atomic.Int64
	nc, err := nats.Connect(proxy.url(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.ReconnectHandler(func(*nats.Conn) { reconnects.Add(1) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	var redelivered atomic.Int64
	c, err := engine.New(db.Pool, js, engine.Options{
		Name: "versions", EventTypes: []string{"version.set"},
		Handler:    redeliveryCounter{versionHandler{member: "a", attempts: &sync.Map{}, dead: new(atomic.Bool)}, &redelivered},
		Partitions: stream.DefaultPartitions, BatchSize: 16, AckWait: 2 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	want := map[string]int{}
	publish := func(rounds int) {
		for range rounds {
			for k := range keys {
				key := fmt.Sprintf("k%d", k)
				want[key]++
				body, _ := json.Marshal(versionBody{Key: key, V: want[key]})
				ns.PublishKeyedHook(t, "demo", fmt.Sprintf("%s-v%d", key, want[key]), "version.set", key, body)
			}
		}
	}
	publish(20)
	for range 12 {
		stop := make(chan struct{})
		go func() {
			time.Sleep(300 * time.Millisecond)
			proxy.cut()
			close(stop)
		}()
		for {
			select {
			case <-stop:
			default:
				publish(1)
				continue
			}
			break
		}
		time.Sleep(700 * time.Millisecond)
		publish(5)
	}
	total := 0
	for _, v := range want {
		total += v
	}
	hookbridgetest.Eventually(t, 2*time.Minute, "every version applied", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.inbox`) == total
	})
	t.Logf("%d events, %d reconnects, %d applied only on a redelivery", total, reconnects.Load(), redelivered.Load())
	checkOrder(t, db, want, nil)
}
