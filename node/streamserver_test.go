package node

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/pki"
)

// waitIdleServers polls until the node has want idle stream servers.
func waitIdleServers(t *testing.T, tn *testNode, want int32) {
	t.Helper()
	for i := 0; tn.servers.idle.Load() != want; i++ {
		if i == 1000 {
			t.Fatalf("idle stream servers = %d, want %d", tn.servers.idle.Load(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStreamServerReused: with a stream per request, the goroutine that
// served one stream serves the next instead of a fresh one per stream.
func TestStreamServerReused(t *testing.T) {
	tn := startNode(t, func(c *Config) { c.WarmUp = time.Hour })
	tn.servers.idleWait.Store(int64(time.Hour)) // no idle server leaves by itself here
	c := tn.dial(pki.RoleClient)
	ctx := ctxT(t)
	for i := range 5 {
		var pong wire.Pong
		if err := c.CallOnce(ctx, wire.TypePing, nil, &pong); err != nil || pong.NodeID != tn.ID() {
			t.Fatalf("ping %d = %+v, %v", i, pong, err)
		}
		// The stream's server is idle again before the next stream comes.
		waitIdleServers(t, tn, 1)
	}
	if got := tn.servers.reused.Load(); got != 4 {
		t.Fatalf("streams served by a reused server = %d, want 4 of 5", got)
	}
}

// TestReusedStreamServerStartsClean: a reused server serves its next
// stream as a fresh one would: the watch of its last stream is gone, and
// the new stream's first frame is due within the read timeout, not the
// idle timeout its last stream was on.
func TestReusedStreamServerStartsClean(t *testing.T) {
	tn := startNode(t, func(c *Config) {
		c.ReadTimeout = 300 * time.Millisecond
		c.IdleTimeout = time.Hour
	})
	tn.servers.idleWait.Store(int64(time.Hour))
	qc, err := quic.DialAddr(ctxT(t), tn.Addr().String(), tn.tlsFor(pki.RoleClient, "raw"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qc.CloseWithError(0, "") })
	open := func() *quic.Stream {
		s, err := qc.OpenStreamSync(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		s.SetDeadline(time.Now().Add(5 * time.Second))
		return s
	}

	// The first stream watches a topic, past its first frame (so on the
	// idle timeout), then finishes.
	s1 := open()
	f, _ := wire.NewRequest(wire.TypeWatch, 1, &wire.Watch{Topics: []wire.TopicVersion{{Topic: "t"}}})
	if err := wire.WriteFrame(s1, f); err != nil {
		t.Fatal(err)
	}
	if resp, err := wire.ReadFrame(s1, 1<<20); err != nil || resp.Error != nil {
		t.Fatalf("watch: %+v, %v", resp, err)
	}
	if tn.watches.watchers() != 1 {
		t.Fatalf("watch streams = %d, want 1", tn.watches.watchers())
	}
	s1.Close()
	if _, err := io.ReadAll(s1); err != nil {
		t.Fatalf("first stream did not end cleanly: %v", err)
	}
	waitIdleServers(t, tn, 1)
	if n := tn.watches.watchers(); n != 0 {
		t.Fatalf("watch streams after the watching stream ended = %d, want 0", n)
	}

	// The second stream, on the reused server, says nothing: the read
	// timeout (300 ms), not the idle timeout (1 h), must cut it off
	// before the test's own 5 s deadline.
	s2 := open()
	if _, err := s2.Write([]byte{0, 0}); err != nil { // half a header: the stream reaches the node
		t.Fatal(err)
	}
	_, err = io.ReadAll(s2)
	var se *quic.StreamError
	if !errors.As(err, &se) || se.ErrorCode != codeStreamTimeout {
		t.Fatalf("silent new stream on a reused server not reset by the read timeout: %v", err)
	}
	if got := tn.servers.reused.Load(); got != 1 {
		t.Fatalf("streams served by a reused server = %d, want 1", got)
	}
}

// TestStreamServersEndAtShutdown: idle stream servers are goroutines of
// the node: Shutdown ends them at once (goleak checks none outlives the
// tests), whatever their idle wait.
func TestStreamServersEndAtShutdown(t *testing.T) {
	tn := startNode(t, nil)
	tn.servers.idleWait.Store(int64(time.Hour)) // only Shutdown can end them
	c := tn.dial(pki.RoleClient)
	ctx := ctxT(t)
	// Concurrent streams, so several servers are started.
	errs := make(chan error, 8)
	for range 8 {
		go func() { errs <- c.CallOnce(ctx, wire.TypePing, nil, &wire.Pong{}) }()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; tn.servers.idle.Load() == 0 || tn.stats.streams.Load() != 0; i++ {
		if i == 1000 {
			t.Fatalf("no idle stream server: idle %d, streams %d", tn.servers.idle.Load(), tn.stats.streams.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tn.Shutdown(sctx); err != nil {
		t.Fatalf("Shutdown with idle stream servers: %v", err)
	}
	if n := tn.servers.idle.Load(); n != 0 {
		t.Fatalf("idle stream servers after Shutdown = %d", n)
	}
}
