package node

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/pki"
)

// TestAcceptBurstWithStalledHandOff: while the hand-off of one accepted
// connection stalls (as when the goroutine that accepted it is not
// scheduled for a while on a loaded machine), a burst of more connections
// than quic-go's accept queue holds (32) completes its handshakes. quic-go
// refuses a connection whose handshake completes while that queue is full,
// after the whole handshake was paid for; the node must keep taking
// connections off the queue, so none is refused.
func TestAcceptBurstWithStalledHandOff(t *testing.T) {
	const burst = 64
	release := make(chan struct{})
	var stalled atomic.Bool
	testHookAccepted = func() {
		if stalled.CompareAndSwap(false, true) {
			<-release
		}
	}
	t.Cleanup(func() { testHookAccepted = nil })
	var once sync.Once
	unstall := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unstall) // before the node's shutdown, which waits for the stalled acceptor
	tn := startNode(t, func(c *Config) { c.MaxConnsPerHost, c.MaxConnsPerIdentity = 2*burst, 2*burst })
	conf := tn.tlsFor(pki.RoleClient, "burst")

	first := tn.dialTLS(conf)
	waitFor(t, "the first connection's hand-off to stall", stalled.Load)

	conns := make([]*client.Conn, burst)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c, err := client.Dial(ctx, tn.Addr().String(), client.Config{TLS: conf})
			if err != nil {
				t.Errorf("dial %d: %v", i, err)
				return
			}
			conns[i] = c
		}()
	}
	wg.Wait()
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	// Either the node serves the whole burst, or quic-go refuses some of it.
	waitFor(t, "the burst to be served or refused", func() bool {
		return tn.stats.conns.Load() >= burst || refusedAny(conns)
	})
	unstall()
	refused := 0
	for i, c := range append(conns, first) {
		if c == nil {
			continue
		}
		if _, err := c.Ping(ctxT(t)); err != nil {
			refused++
			if refused <= 3 {
				t.Logf("connection %d: %v", i, err)
			}
		}
	}
	if refused > 0 {
		t.Errorf("%d of %d connections refused while one hand-off stalled", refused, burst+1)
	}
}

func refusedAny(conns []*client.Conn) bool {
	for _, c := range conns {
		if c == nil {
			continue
		}
		select {
		case <-c.Done():
			return true
		default:
		}
	}
	return false
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
