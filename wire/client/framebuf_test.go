package client

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// TestCallBuffersTimer: the timer of a call's buffers, left armed by an
// earlier call with an earlier deadline, neither cuts a later call short
// (it re-arms for that call's deadline) nor lets one with a deadline
// before it run over (it is moved earlier).
func TestCallBuffersTimer(t *testing.T) {
	addr, conf := deafPeer(t)
	c, err := Dial(context.Background(), addr, Config{TLS: conf})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := new(callBuffers)
	read := func(due time.Time) error {
		s, err := c.qc.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		defer s.CancelRead(0)
		if _, err := s.Write([]byte{0, 0, 0, 1, 0xa0}); err != nil { // the deaf peer learns of the stream
			t.Fatal(err)
		}
		b.watchStream(s, due)
		defer b.unwatch()
		return within(t, func() error { _, err := s.Read(make([]byte, 1)); return err })
	}
	// A call that ended long before its deadline leaves the timer armed.
	s, err := c.qc.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	b.watchStream(s, time.Now().Add(50*time.Millisecond))
	b.unwatch()
	s.CancelWrite(0)

	due := time.Now().Add(400 * time.Millisecond)
	if err := read(due); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a later call's read: %v, want its deadline", err)
	}
	if now := time.Now(); now.Before(due) {
		t.Fatalf("a later call was cut %v before its deadline, by the earlier call's", due.Sub(now))
	}
	// Armed far ahead, then a call with a near deadline.
	b.watchStream(s, time.Now().Add(time.Hour))
	b.unwatch()
	if err := read(time.Now().Add(30 * time.Millisecond)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("an earlier deadline's read: %v", err)
	}
}
