package delivery

import (
	"io"
	"log/slog"
	"testing"
)

// What a reader learns from its deliveries: a gap in the durable's
// delivery sequence with a new pin id means another reader got
// deliveries meanwhile, so what this one held and had not started is
// dropped (never attempted here, no longer kept in progress) and an
// ordered endpoint gates what it reads next; a new pin without a gap (a
// lapse renewed by this reader alone) changes nothing.
func TestPinMoveFencesWhatWasHeld(t *testing.T) {
	m := &Manager{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	s := &Sender{e: Endpoint{Name: "e", Ordered: true}, m: m, log: m.log, roomCh: make(chan struct{}, 1),
		held: map[uint64]*item{}, keys: map[string]*keyState{}}
	s.observeLocked(1, "pin-a") // first delivery: gated
	if !s.gated {
		t.Fatal("an ordered reader's first delivery does not gate")
	}
	s.gated = false
	started := &item{seq: 1, key: "k", inflight: true}
	waiting := &item{seq: 2, key: "k"}
	s.held[1], s.held[2] = started, waiting
	s.keys["k"] = &keyState{mem: []*item{started, waiting}, running: true}

	s.observeLocked(2, "pin-b") // a new pin, no gap: nothing changes
	if s.epoch != 0 || len(s.held) != 2 || s.gated {
		t.Fatalf("a repin without a gap fenced or gated: epoch %d, held %d, gated %v", s.epoch, len(s.held), s.gated)
	}
	s.observeLocked(5, "pin-c") // a gap and a new pin: fenced
	if s.epoch != 1 {
		t.Fatal("a gap with a new pin did not fence")
	}
	if _, ok := s.held[2]; ok || len(s.keys["k"].mem) != 1 || s.keys["k"].mem[0] != started {
		t.Fatalf("held %v, key %v: the delivery not started must be dropped, the one in flight kept", s.held, s.keys["k"].mem)
	}
	if !s.gated {
		t.Fatal("an ordered reader does not gate after a gap")
	}
	s.gated = false
	s.observeLocked(7, "pin-c") // a gap, same pin (lost in flight): gated, not fenced
	if s.epoch != 1 || !s.gated {
		t.Fatalf("a gap without a new pin: epoch %d, gated %v; want gated, not fenced", s.epoch, s.gated)
	}
}
