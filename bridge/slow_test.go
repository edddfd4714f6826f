package bridge_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/hookbridgetest"
)

// TestSlowSendersDoNotStarveFastOnes opens 64 connections that send a
// signed delivery's headers and then trickle its body a byte every 200
// ms, against an ingress with only 8 in-flight slots and the default 30 s
// ReadTimeout. Normal signed traffic sent meanwhile must still be
// accepted, promptly: the slots are taken only once a body is in. The
// trickling senders are cut off by the minimum body rate within a few
// seconds, and HOOKS holds exactly the normal deliveries. (Before, the
// slow senders took every slot until ReadTimeout and the normal traffic
// got 503 overloaded.)
func TestSlowSendersDoNotStarveFastOnes(t *testing.T) {
	t.Parallel()
	js := hookbridgetest.NATS(t)
	js.EnsureHooks(t)
	sc := schemeNamed(t, verify.SchemeGitHub)
	in := serveOn(t, js.JS, bridge.Options{MaxInFlight: 8}, sc.source(t))
	in.js = js
	addr := in.url[len("http://"):]

	const slow = 64
	var conns []net.Conn
	var sent []<-chan int
	var lengths []int
	for i := range slow {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		head, body := rawRequest(t, sc, fmt.Sprintf("slow-%d", i))
		if _, err := conn.Write(append(head, body[0])); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
		sent = append(sent, trickle(conn, body[1:], 200*time.Millisecond))
		lengths = append(lengths, len(body)-1)
	}
	time.Sleep(300 * time.Millisecond) // every slow request is in its handler

	const normal = 40
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		codes   = map[int]int{}
		slowest time.Duration
	)
	next := make(chan int)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				h, body, _ := sc.sample(fmt.Sprintf("fast-%d", i))
				sc.sign(t, sc.secrets[0], in.clock.Now(), h, body)
				start := time.Now()
				a := in.post(t, sc.name, h, body)
				mu.Lock()
				codes[a.code]++
				slowest = max(slowest, time.Since(start))
				mu.Unlock()
			}
		}()
	}
	for i := range normal {
		next <- i
	}
	close(next)
	wg.Wait()
	t.Logf("normal traffic beside %d trickling senders: %v, slowest answer %v", slow, codes, slowest)
	if codes[http.StatusAccepted] != normal {
		t.Fatalf("normal traffic: answers %v, want %d x 202", codes, normal)
	}
	if slowest > 2*time.Second {
		t.Fatalf("slowest normal answer took %v", slowest)
	}

	// The trickling senders are cut off by the minimum rate (the grace
	// plus 32 KiB at 16 KiB/s is about 4 s), long before ReadTimeout.
	start := time.Now()
	for i, conn := range conns {
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		switch {
		case err == nil:
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("slow sender %d: answer %d, want 400 or a closed connection", i, resp.StatusCode)
			}
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		default:
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("slow sender %d still connected after %v", i, time.Since(start))
			}
		}
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Fatalf("slow senders cut off after %v more", d)
	}
	for _, conn := range conns {
		conn.Close()
	}
	for i, ch := range sent {
		if n := <-ch; n >= lengths[i] {
			t.Fatalf("slow sender %d sent its whole body", i)
		}
	}
	wantMsgs(t, in, normal)
}
