package client

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/pki"
)

// deafPeer is a QUIC server that accepts streams and never reads them, so
// a client's writes fill QUIC flow control and block.
func deafPeer(t *testing.T) (addr string, conf *tls.Config) {
	t.Helper()
	return testPeer(t, nil)
}

// testPeer is a QUIC server on loopback with a local CA that hands every
// stream it accepts to serve (none: the stream is accepted and left
// alone), and a client TLS config it accepts; both end with the test.
func testPeer(tb testing.TB, serve func(*quic.Stream)) (addr string, conf *tls.Config) {
	tb.Helper()
	dir := tb.TempDir()
	local, err := pki.EnsureLocal(dir, nil)
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := quic.ListenAddr("127.0.0.1:0", pki.ServerConfig(local.Node, local.CAPool, false), nil)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			qc, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			go func() {
				for {
					s, err := qc.AcceptStream(ctx)
					if err != nil {
						return
					}
					if serve != nil {
						go serve(s)
					}
				}
			}()
		}
	}()
	tb.Cleanup(func() { cancel(); ln.Close(); <-done })
	cert, pool, err := pki.LocalOperator(dir)
	if err != nil {
		tb.Fatal(err)
	}
	return ln.Addr().String(), pki.ClientConfig(&cert, pool, "")
}

// TestCallGivesUpWhenThePeerStopsReading: a write that cannot proceed ends
// at the call's deadline instead of blocking the pipe for ever.
func TestCallGivesUpWhenThePeerStopsReading(t *testing.T) {
	addr, conf := deafPeer(t)
	c, err := Dial(context.Background(), addr, Config{TLS: conf})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reg := &wire.Register{Cluster: "c", BrokerName: "b", Addr: "10.0.0.1:1"}
	for i := range 40_000 {
		reg.Topics = append(reg.Topics, wire.TopicConfig{Name: "topic_" + string(rune('a'+i%26)) + time.Duration(i).String()})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := c.Register(ctx, reg); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a register to a peer that never reads succeeded")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Call blocked past its deadline on a peer that never reads")
	}
}
