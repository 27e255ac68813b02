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
		first, err := g.enter(ctx)
		if err != nil {
			t.Fatal(err)
		}
		order := make(chan int, 3)
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := g.enter(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				order <- i
				s.release()
			}()
			// The next one arrives once this one waits.
			waitFor(t, "a waiter", func() bool { return waiting(g) == i+1 })
		}
		first.release()
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
		s, _ := g.enter(ctx)
		defer s.release()
		if _, err := g.enter(ctx); !errors.Is(err, errHandshakeQueueTimeout) {
			t.Errorf("full gate: %v, want errHandshakeQueueTimeout", err)
		}
	})
	t.Run("a stalled handshake gives its slot back", func(t *testing.T) {
		g := newHandshakeGate(1, time.Minute, 10*time.Millisecond)
		s1, _ := g.enter(ctx) // never released: the hold timer frees the slot
		s2, err := g.enter(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s1.release() // late, after the timer: must not free a slot twice
		s1.extend(time.Minute)
		s2.release()
		s2.release()
		if n := len(g.slots); n != 0 {
			t.Errorf("%d slots taken after every handshake left", n)
		}
	})
	t.Run("close wakes the waiters", func(t *testing.T) {
		g := newHandshakeGate(1, time.Minute, time.Minute)
		s, _ := g.enter(ctx)
		defer s.release()
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

// TestBrokerKeepsItsSlotUntilItRegisters: in a storm, a broker that has
// connected still holds its handshake slot until its registration is
// done, so the node finishes the registrations of the brokers it let in
// before it starts on more handshakes; otherwise those registrations wait
// behind every new handshake, past the brokers' request timeout.
func TestBrokerKeepsItsSlotUntilItRegisters(t *testing.T) {
	tn := startNode(t, func(c *Config) { c.MaxHandshakes = 1 })
	first := tn.dial(pki.RoleBroker, "b1")
	defer first.Close()

	next := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := client.Dial(ctx, tn.Addr().String(), client.Config{TLS: tn.tlsFor(pki.RoleBroker, "second", "b2")})
		if err == nil {
			c.Close()
		}
		next <- err
	}()
	waitFor(t, "the second broker's handshake to wait for the first one's registration",
		func() bool { return waiting(tn.adm.gate) == 1 })
	if _, err := first.Register(ctxT(t), registration("c1", "b1", 0, "10.0.0.1:1", "t")); err != nil {
		t.Fatal(err)
	}
	if err := <-next; err != nil {
		t.Fatalf("second broker, once the first registered: %v", err)
	}
}
