package node

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/pki"
)

// TestHandshakesWaitTheirTurn: with MaxHandshakes slots, no more
// handshakes than that are worked on at once however many clients dial
// together, and every waiting one completes when its turn comes rather
// than failing. Without the bound a storm of reconnecting brokers shares
// the CPU among every handshake at once, so all of them outlast the
// clients' dial timeout together and the node's work is lost.
func TestHandshakesWaitTheirTurn(t *testing.T) {
	const slots, dials = 2, 8
	var inside, most atomic.Int32
	turn := make(chan struct{})
	testHookHandshake = func() {
		n := inside.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-turn
		inside.Add(-1)
	}
	t.Cleanup(func() { testHookHandshake = nil })
	tn := startNode(t, func(c *Config) { c.MaxHandshakes = slots; c.MaxConnsPerHost, c.MaxConnsPerIdentity = 2*dials, 2*dials })
	conf := tn.tlsFor(pki.RoleClient, "storm")

	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := range dials {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := client.Dial(ctx, tn.Addr().String(), client.Config{TLS: conf})
			if err != nil {
				failed.Add(1)
				t.Errorf("dial %d: %v", i, err)
				return
			}
			c.Close()
		}()
	}
	// Let handshakes in one at a time, each once some are held and the
	// others have had a moment to crowd in.
	for range dials {
		waitFor(t, "a handshake in progress", func() bool { return inside.Load() > 0 })
		time.Sleep(20 * time.Millisecond)
		turn <- struct{}{}
	}
	wg.Wait()
	if m := most.Load(); m > slots {
		t.Errorf("%d handshakes worked on at once, want at most %d", m, slots)
	}
	if v := metricValue(t, tn, "edgereg_connections_refused_total", "reason", refusedQueue); v != 0 {
		t.Errorf("%v handshakes timed out in the queue", v)
	}
}

// TestHandshakeGate covers the slot queue by itself: arrival order, the
// wait bound, the hold bound and close.
func TestHandshakeGate(t *testing.T) {
	ctx := context.Background()
	t.Run("first come first served", func(t *testing.T) {
		g := newHandshakeGate(1, time.Minute, time.Minute)
		leave, err := g.enter(ctx)
		if err != nil {
			t.Fatal(err)
		}
		order := make(chan int, 3)
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, err := g.enter(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				order <- i
				l()
			}()
			// The next one arrives once this one waits.
			waitFor(t, "a waiter", func() bool { return waiting(g) == i+1 })
		}
		leave()
		wg.Wait()
		close(order)
		want := 0
		for got := range order {
			if got != want {
				t.Errorf("waiter %d served as number %d", got, want)
			}
			want++
		}
	})
	t.Run("a wait is bounded", func(t *testing.T) {
		g := newHandshakeGate(1, 10*time.Millisecond, time.Minute)
		leave, _ := g.enter(ctx)
		defer leave()
		if _, err := g.enter(ctx); !errors.Is(err, errHandshakeQueueTimeout) {
			t.Errorf("full gate: %v, want errHandshakeQueueTimeout", err)
		}
	})
	t.Run("a stalled handshake gives its slot back", func(t *testing.T) {
		g := newHandshakeGate(1, time.Minute, 10*time.Millisecond)
		leave, _ := g.enter(ctx) // never left: the hold timer frees the slot
		l2, err := g.enter(ctx)
		if err != nil {
			t.Fatal(err)
		}
		leave() // late, after the timer: must not free a slot twice
		l2()
		l2()
		if n := len(g.slots); n != 0 {
			t.Errorf("%d slots taken after every handshake left", n)
		}
	})
	t.Run("close wakes the waiters", func(t *testing.T) {
		g := newHandshakeGate(1, time.Minute, time.Minute)
		leave, _ := g.enter(ctx)
		defer leave()
		done := make(chan error)
		go func() { _, err := g.enter(ctx); done <- err }()
		waitFor(t, "a waiter", func() bool { return waiting(g) == 1 })
		g.close()
		if err := <-done; !errors.Is(err, errGateClosed) {
			t.Errorf("after close: %v", err)
		}
	})
}

func waiting(g *handshakeGate) int { return int(g.waiting.Load()) }
