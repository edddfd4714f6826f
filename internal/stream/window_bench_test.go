package stream_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/procfs"

	"github.com/hookbridge/hookbridge/internal/stream"
)

// BenchmarkDuplicateWindowMemory measures what nats-server keeps in memory
// per message id inside the duplicate window: the same n messages are
// published to HOOKS on a fresh embedded server once with a Nats-Msg-Id
// each and once without, and the live heap after a GC is compared.
// Reported: bytes per id (heap) and, for the process, bytes of RSS per id.
//
//	go test -run '^$' -bench DuplicateWindowMemory -benchtime 1x ./internal/stream/
func BenchmarkDuplicateWindowMemory(b *testing.B) {
	const n = 200_000
	for range b.N {
		without := heapAfterPublishing(b, n, false)
		with := heapAfterPublishing(b, n, true)
		b.ReportMetric(float64(with.heap-without.heap)/n, "heap-B/id")
		b.ReportMetric(float64(with.rss-without.rss)/n, "rss-B/id")
	}
}

type memFigures struct{ heap, rss int64 }

// heapAfterPublishing publishes n ingress-sized messages to HOOKS on a
// fresh embedded server and returns the live heap and RSS growth while
// the server still runs.
func heapAfterPublishing(b *testing.B, n int, ids bool) memFigures {
	b.Helper()
	ns, err := server.NewServer(&server.Options{JetStream: true, StoreDir: b.TempDir(), DontListen: true, NoSigs: true, NoLog: true})
	if err != nil {
		b.Fatal(err)
	}
	go ns.Start()
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	if !ns.ReadyForConnections(10 * time.Second) {
		b.Fatal("not ready")
	}
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := stream.Ensure(ctx, js, stream.HooksConfig(stream.Options{DuplicateWindow: time.Hour})); err != nil {
		b.Fatal(err)
	}
	before := liveHeap()
	rss0 := rssBytes()
	body := make([]byte, 120)
	for i := range n {
		msg := nats.NewMsg("hooks.demo.order.created")
		msg.Data = body
		if ids {
			// An id the length of a real one: source, ':', a 27-character
			// provider id.
			msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("demo:msg_2b7Xc9Q0aVYpLk3Nw%08d", i))
		}
		if _, err := js.PublishMsgAsync(msg); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(2 * time.Minute):
		b.Fatal("publishes not acknowledged")
	}
	return memFigures{heap: liveHeap() - before, rss: rssBytes() - rss0}
}

func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// rssBytes is this process's resident set (0 where /proc is missing).
func rssBytes() int64 {
	p, err := procfs.Self()
	if err != nil {
		return 0
	}
	st, err := p.Stat()
	if err != nil {
		return 0
	}
	return int64(st.ResidentMemory())
}
